"""Where the test suite's CPU goes: the files and tests that used the most, from a run of
``make test TEST_CPU=FILE`` (``tests/cpu_usage.py`` writes FILE)::

    make test TEST_CPU=/tmp/cpu.jsonl; .venv/bin/python scripts/test_cpu.py /tmp/cpu.jsonl

Prints each pytest process's CPU and wall seconds, then the files and the tests that
used the most CPU, with their wall seconds and their CPU per wall second (a test
below 1 mostly waits).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def read(path: Path) -> list[dict[str, object]]:
    """The recorded tests, one dict each."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def totals(rows: list[dict[str, object]], key: str) -> list[tuple[str, float, float, int]]:
    """``(name, cpu, wall, tests)`` summed by ``key`` ("run", "file" or "test"), most CPU first."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in rows:
        test = str(row["test"])
        name = {"file": test.split("::")[0], "test": test}.get(key, str(row.get(key)))
        entry = sums[name]
        entry[0] += float(str(row["cpu"]))
        entry[1] += float(str(row["wall"]))
        entry[2] += 1
    table = [(name, cpu, wall, int(n)) for name, (cpu, wall, n) in sums.items()]
    return sorted(table, key=lambda t: -t[1])


def table(title: str, rows: list[tuple[str, float, float, int]], top: int) -> str:
    """A plain-text table of ``rows`` (the first ``top``)."""
    lines = [f"{title}", f"{'CPU s':>8} {'wall s':>8} {'CPU/wall':>8} {'tests':>5}  name"]
    for name, cpu, wall, count in rows[:top]:
        density = cpu / wall if wall else 0.0
        lines.append(f"{cpu:8.1f} {wall:8.1f} {density:8.2f} {count:5d}  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figures", type=Path, help="the file make test TEST_CPU=... wrote")
    parser.add_argument("--top", type=int, default=25, help="files and tests listed (25)")
    args = parser.parse_args(argv)
    rows = read(args.figures)
    runs = totals(rows, "run")
    cpu = sum(r[1] for r in runs)
    print(f"{len(rows)} tests, {cpu:.0f} CPU seconds in all")
    print(table("by pytest process", runs, len(runs)))
    print()
    print(table("files, most CPU first", totals(rows, "file"), args.top))
    print()
    print(table("tests, most CPU first", totals(rows, "test"), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
