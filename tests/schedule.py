"""The parallel run's order: the longest units first, so no worker idles at the end.

pytest-xdist's ``--dist loadfile`` hands whole files to workers in the order it is given
(one file per free worker); by default it reorders them by their number of tests, which
puts files of one long test last, where one worker runs them while the others have
nothing left. Here a unit is a file, or a folder of :data:`TOGETHER` (the browser tests:
one worker runs them one after another, so that no two pages share the machine, and
they share one server per app); units are ordered by the seconds their files took in a
recent run (``tests/durations.json``, refreshed by ``scripts/test_durations.py``),
longest first; files not listed keep their collection order after those. A unit's tests
keep their order. The order is the same in every worker (xdist requires it).

A notebook's cells (nbval) run in order in one kernel, so they need a whole-file
distribution: a parallel run that would split them is refused.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).resolve().parent / "durations.json"
ROOT = DURATIONS.parents[1]


def file_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file (repository-relative path) of a recent run; empty if none."""
    if not path.exists():
        return {}
    table = json.loads(path.read_text())
    return {str(name): float(seconds) for name, seconds in table["files"].items()}


#: Folders whose files make one unit of the parallel run (repository-relative, with a slash).
TOGETHER = ("tests/browser/",)


def unit_of(name: str) -> str:
    """The unit of the repository-relative file or test id ``name``: its folder of
    :data:`TOGETHER`, else its file."""
    for folder in TOGETHER:
        if name.startswith(folder):
            return folder.rstrip("/")
    return name.split("::", 1)[0]


def longest_files_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` with whole units (:func:`unit_of`) ordered by the sum of their files'
    ``seconds`` (longest first), stable otherwise."""
    unit_seconds: dict[str, float] = {}
    for name, took in seconds.items():
        unit_seconds[unit_of(name)] = unit_seconds.get(unit_of(name), 0.0) + took

    def key(item: pytest.Item) -> float:
        try:
            name = item.path.relative_to(ROOT).as_posix()
        except ValueError:
            return 0.0
        return -unit_seconds.get(unit_of(name), 0.0)

    return sorted(items, key=key)


class UnitScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
    """``--dist loadfile`` that hands out whole units (:func:`unit_of`), not files."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadFileScheduling | None:
    """The ``loadfile`` distribution by units; any other distribution as xdist makes it."""
    if config.getvalue("dist") != "loadfile":
        return None
    return UnitScheduling(config, log)


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
