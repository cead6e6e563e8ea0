# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTHON  ?= python3

.PHONY: venv setup demo test checks lint typecheck importlint unit notebooks bench clean browser-deps labextension-test binder-check readme-pictures

# The editable install also builds the lab extension (labextension/ -> jupyter_disttrain/labextension).
# uv installs the packages (downloads side by side, bytecode compiled on every core: about
# 1 minute on a fresh machine, where pip took about 4.5); pip installs only uv. uv reads
# none of pip's settings: pip's find-links (a local wheel of torch's CPU build, where the
# machine has one) is passed on, and TLS trusts the system's certificates as pip does.
UV_VERSION ?= 0.13.9
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
$(STAMP): pyproject.toml constraints.txt labextension/package.json $(wildcard labextension/src/*.ts labextension/style/* labextension/schema/*)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install --python $(PY) --quiet --system-certs --compile-bytecode \
		$(if $(FIND_LINKS),--find-links $(FIND_LINKS)) -c constraints.txt -e '.[test,bench,tensorflow,jax]'
	@touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(PY) scripts/demo.py notebooks/01-quickstart.ipynb

lint: venv
	$(PY) -m ruff check jupyter_disttrain tests bench scripts
	$(PY) -m ruff format --check jupyter_disttrain tests bench scripts

typecheck: venv
	$(PY) -m mypy

# DESIGN.md's layers as import-linter contracts (pyproject.toml [tool.importlinter]).
importlint: venv
	$(VENV)/bin/lint-imports

# The browser test needs Debian's Chromium and its Node harness: installed here when missing.
CHROMIUM ?= /usr/bin/chromium
browser-deps:
	@test -x $(CHROMIUM) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	@test -d tests/browser/node_modules/playwright-core || (cd tests/browser && npm ci --no-audit --no-fund)

# TypeScript unit tests of the lab extension (jest; jlpm comes with the venv); the Node
# packages are installed again when yarn.lock changed since.
labextension-test: venv
	@test labextension/node_modules/.yarn-state.yml -nt labextension/yarn.lock \
		|| (cd labextension && ../$(VENV)/bin/jlpm install)
	cd labextension && ../$(VENV)/bin/jlpm test --ci

# README's pictures of a failing and a hung job, from the cause browser test's screenshots
# (run it first: $(PY) -m pytest tests/browser/test_cause_browser.py).
readme-pictures: venv
	$(PY) scripts/readme_pictures.py

# The Binder recipe in a fresh venv: install, both extensions enabled, quickstart runs.
binder-check:
	bash scripts/binder_check.sh

# The static checks: lint, types, layers and the lab extension's own tests.
checks: lint typecheck importlint labextension-test

# The whole suite in two pytest runs. First the tests and the notebooks in parallel
# (pytest-xdist, TEST_WORKERS processes), by units of tests/schedule.py, the longest first:
# one file's tests -- a notebook's cells -- run in one worker, in order, sharing its module
# fixtures and kernel; the browser tests are one unit, so one worker runs them one after
# another (no two pages share the machine; one JupyterLab and one Notebook 7 server for them
# all), then takes files like the others. Each test process has its own job home, temporary
# directory and emulators (each worker's emulators hand out ports of a slice of their own).
# Then, alone, the tests marked serial (they measure time or resources), collected from the
# files that say `mark.serial` only (1 s, where collecting every file takes 5 s on a warm
# venv; tests/schedule.py refuses a serial mark set anywhere else). The static checks run
# beside the serial run, at the lowest CPU priority, and print when both end: the parallel
# run keeps both CPUs busy (1.9 of 2 on average), so beside it the checks' CPU (about 35 s
# on a fresh clone, mypy's first run 25 s of it) costs about half that in time, where the
# serial tests leave a CPU idle most of their minute (0.8 CPU busy on average) and a process
# at nice 19 gets about 1.5 % of a CPU a test's process wants. Why four workers on 2 cores:
# the tests wait on the processes they start. On a fresh clone the parallel part took 12:43
# with two workers and the browser tests in a run of their own beside them (the CPUs idled
# half the time once the browser tests were done), 12:10 with three workers and 11:36 with
# four, the CPUs busy all along. Two pages never share the machine: a page beside two other
# pages and a test could take over 10 s to act on a key. All always run; any failing fails.
# Each pytest run prints its 20 slowest tests. The package's bytecode is written first: the
# kernels, agents and CLI processes the tests start would otherwise each compile it again
# where bytecode is not written (PYTHONDONTWRITEBYTECODE), ~0.25 s a process.
TEST_WORKERS ?= 4
# The slowest tests each pytest run lists (DURATIONS=0: every test, for tests/durations.json).
DURATIONS ?= 20
# TEST_CPU=FILE: each test's CPU seconds, its processes' and theirs, go to FILE
# (tests/cpu_usage.py; root only); scripts/test_cpu.py FILE says where the CPU went.
TEST_CPU ?=
PYTEST  := $(if $(TEST_CPU),DISTRAIN_TEST_CPU=$(abspath $(TEST_CPU)) )$(PY) -m pytest -p no:cacheprovider --durations=$(DURATIONS)
# The venv (pip) and the browser's packages (apt, npm) do not depend on each other: made
# side by side.
setup:
	@$(MAKE) --no-print-directory -j2 venv browser-deps

test: setup
	$(PY) -m compileall -q jupyter_disttrain > /dev/null
	status=0; checked=$$(mktemp); \
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --nbval-lax -m "not serial" tests notebooks \
		|| status=$$?; \
	nice -n 19 $(MAKE) --no-print-directory checks > $$checked 2>&1 & checks=$$!; \
	$(PYTEST) -m serial $$(grep -rlE --include='test_*.py' 'mark\.serial' tests) || status=$$?; \
	wait $$checks || { status=1; echo "make checks failed:"; }; \
	cat $$checked; rm -f $$checked; \
	exit $$status

bench: venv
	$(PY) bench/launch.py
	$(PY) bench/monitor.py
	$(PY) bench/k8s_api.py
	$(PY) bench/checkpoints.py
	$(PY) bench/nccl_corpus.py
	$(PY) bench/tracking.py
	$(PY) bench/session.py
	$(PY) bench/jax_launch.py
	$(PY) bench/autolog.py
	$(PY) bench/pod_network.py
	$(PY) bench/warm_libraries.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
