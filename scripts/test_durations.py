"""Write ``tests/durations.json`` (seconds per test file) from a pytest JUnit XML report or
the output of ``make test DURATIONS=0``.

``tests/schedule.py`` orders the parallel run's files by it, longest first. Refresh it
after a full run that wrote a report or listed every test's duration::

    make test DURATIONS=0 > /tmp/test.log; .venv/bin/python scripts/test_durations.py /tmp/test.log
    .venv/bin/python -m pytest -n 4 --dist loadfile -m "not serial" --junitxml=/tmp/junit.xml tests
    .venv/bin/python scripts/test_durations.py /tmp/junit.xml

From a log, the first list of durations is read: the parallel run's.

Each test's time is its setup, call and teardown (pytest's default for JUnit reports).
Files that took less than ``--min`` seconds are left out (they keep collection order).
"""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "tests" / "durations.json"


def test_file(classname: str) -> str | None:
    """The repository-relative file of a JUnit ``classname`` (module, maybe a class after;
    a notebook's cells: its path with dots, ``notebooks.01-quickstart.ipynb``)."""
    if classname.endswith(".ipynb"):
        folders, name = classname[: -len(".ipynb")].rsplit(".", 1)
        notebook = Path(*folders.split("."), f"{name}.ipynb")
        return notebook.as_posix() if (REPO / notebook).is_file() else None
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (REPO / candidate).is_file():
            return candidate.as_posix()
    return None


def file_seconds(report: Path) -> dict[str, float]:
    """Total seconds per test file in the JUnit XML ``report``."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        name = test_file(case.get("classname", ""))
        if name is not None:
            totals[name] += float(case.get("time", "0"))
    return dict(totals)


#: One line of pytest's ``--durations`` list: seconds, phase, test id.
DURATION_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(\S+?)::")


def log_seconds(text: str) -> dict[str, float]:
    """Total seconds per test file in the first ``slowest durations`` list of ``text``."""
    totals: dict[str, float] = defaultdict(float)
    listing = False
    for line in text.splitlines():
        if "slowest" in line and "durations" in line:
            listing = True
            continue
        if not listing:
            continue
        if line.startswith("="):
            break
        found = DURATION_LINE.match(line)
        if found and (REPO / found[2]).is_file():
            totals[found[2]] += float(found[1])
    return dict(totals)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a JUnit XML report or a make test log")
    parser.add_argument("--min", type=float, default=5.0, help="leave out shorter files")
    parser.add_argument("--out", type=Path, default=TARGET, help="where to write the table")
    args = parser.parse_args()
    if args.report.suffix == ".xml":
        totals = file_seconds(args.report)
    else:
        totals = log_seconds(args.report.read_text(errors="replace"))
    kept = {
        name: round(s, 1)
        for name, s in sorted(totals.items(), key=lambda kv: -kv[1])
        if s >= args.min
    }
    note = "seconds per test file in one parallel run (setup, call and teardown); "
    note += "tests/schedule.py runs the longest first; scripts/test_durations.py writes it"
    args.out.write_text(json.dumps({"note": note, "files": kept}, indent=1) + "\n")
    print(f"{len(kept)} files of {len(totals)} written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
