# Two commands do all set-up: `make demo` and `make test` (each creates .venv when missing).
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTHON  ?= python3

.PHONY: venv demo test lint typecheck unit notebooks bench clean browser-deps

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench,tensorflow]'
	@touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(PY) scripts/demo.py notebooks/01-quickstart.ipynb

lint: venv
	$(PY) -m ruff check jupyter_disttrain tests bench scripts
	$(PY) -m ruff format --check jupyter_disttrain tests bench scripts

typecheck: venv
	$(PY) -m mypy

# The browser test needs Debian's Chromium and its Node harness: installed here when missing.
CHROMIUM ?= /usr/bin/chromium
browser-deps:
	@test -x $(CHROMIUM) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	@test -d tests/browser/node_modules/playwright-core || (cd tests/browser && npm ci --no-audit --no-fund)

test: venv lint typecheck browser-deps
	$(PY) -m pytest -p no:cacheprovider --nbval-lax tests notebooks

bench: venv
	$(PY) bench/launch.py
	$(PY) bench/monitor.py
	$(PY) bench/k8s_api.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
