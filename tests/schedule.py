"""The parallel run's order: the longest test files first, so no worker idles at the end.

pytest-xdist's ``--dist loadfile`` hands whole files to workers in the order it is given
(one file per free worker); by default it reorders them by their number of tests, which
puts files of one long test (the browser tests) last, where one worker runs them while
the other has nothing left. Here the files are ordered by the seconds they took in a
recent run (``tests/durations.json``, refreshed by ``scripts/test_durations.py``), longest
first; files not listed keep their collection order after those. A file's tests keep
their order. The order is the same in every worker (xdist requires it).

A notebook's cells (nbval) run in order in one kernel, so they need a whole-file
distribution: a parallel run that would split them is refused.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
ROOT = DURATIONS.parents[1]


def file_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file (repository-relative path) of a recent run; empty if none."""
    if not path.exists():
        return {}
    table = json.loads(path.read_text())
    return {str(name): float(seconds) for name, seconds in table["files"].items()}


def longest_files_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` with whole files ordered by ``seconds`` (longest first), stable otherwise."""

    def key(item: pytest.Item) -> float:
        try:
            name = item.path.relative_to(ROOT).as_posix()
        except ValueError:
            return 0.0
        return -seconds.get(name, 0.0)

    return sorted(items, key=key)


def pytest_configure(config: pytest.Config) -> None:
    """Keep the order made here: xdist would sort files by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


#: pytest-xdist distributions that keep a file's tests in one worker, in order.
WHOLE_FILES = ("no", "loadfile", "loadscope")


#: What marks a test file as holding serial tests: `make test`'s serial run collects only
#: the files whose text says it.
SERIAL_MARK = "mark.serial"


def refuse_unsaid_serial(items: list[pytest.Item]) -> None:
    """Refuse a serial test whose own file does not say ``mark.serial``: `make test`'s
    serial run would never collect it (and the parallel run leaves it out)."""
    for item in items:
        if item.get_closest_marker("serial") is None or item.path.suffix != ".py":
            continue
        if SERIAL_MARK not in _text(item.path):
            raise pytest.UsageError(
                f"{item.nodeid} is marked serial from outside its file; mark it with "
                f"pytest.{SERIAL_MARK} in the file (make test's serial run finds it there)"
            )


def pytest_deselected(items: list[pytest.Item]) -> None:
    """The tests ``-m`` left out are checked too (the parallel run leaves serial ones out)."""
    refuse_unsaid_serial(items)


@functools.cache
def _text(path: Path) -> str:
    return path.read_text()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first; notebooks only with a whole-file distribution (module docstring);
    serial tests only where their file says so."""
    dist = str(getattr(config.option, "dist", "no"))
    if dist not in WHOLE_FILES and any(item.path.suffix == ".ipynb" for item in items):
        raise pytest.UsageError(
            f"--dist {dist} would hand one notebook's cells to different workers; "
            "run notebooks with --dist loadfile (as `make test` does)"
        )
    refuse_unsaid_serial(items)
    items[:] = longest_files_first(items, file_seconds())
