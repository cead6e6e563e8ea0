"""Each test's CPU, its child processes' included (tests/cpu_usage.py), and the table
scripts/test_cpu.py makes of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cpu_usage import HIERARCHIES, PREFIX, own_group

#: A test that waits on a child process burning about a second of CPU; one that sleeps.
BURN = """
import subprocess, sys, time


def test_waits_on_a_busy_child():
    burn = "import time\\nend = time.process_time() + 1.0\\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)


def test_sleeps():
    time.sleep(0.5)
"""


def run_metered(folder: Path, out: Path) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "test_burn.py").write_text(BURN)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.cpu_usage", "-q", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        env={
            **os.environ,
            "PYTHONPATH": str(Path(__file__).parents[1]),
            "DISTRAIN_TEST_CPU": str(out),
        },
    )


def made_groups() -> list[Path]:
    """The cgroups the plugin made that are still there (under this process's own)."""
    found: list[Path] = []
    for root, usage, _ in HIERARCHIES:
        here = root / own_group(usage).lstrip("/")
        if here.is_dir():
            found.extend(here.rglob(f"{PREFIX}*"))
    return found


def test_a_tests_cpu_counts_its_children_and_a_sleep_counts_none(tmp_path: Path) -> None:
    out = tmp_path / "cpu.jsonl"
    done = run_metered(tmp_path, out)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        row["test"].split("::")[1]: row for row in map(json.loads, out.read_text().splitlines())
    }
    busy, sleeping = rows["test_waits_on_a_busy_child"], rows["test_sleeps"]
    assert 1.0 <= busy["cpu"] < 3.0, busy  # the child's second and its interpreter's start
    assert sleeping["cpu"] < 0.2 and sleeping["wall"] >= 0.5, sleeping
    assert busy["run"] == sleeping["run"] and busy["run"].startswith(PREFIX), rows
    assert not made_groups(), "the run's cgroups were left behind"
    script = Path(__file__).parents[1] / "scripts" / "test_cpu.py"
    said = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=60
    )
    assert said.returncode == 0, said.stderr
    tests = said.stdout.split("tests, most CPU first\n")[1].splitlines()
    assert tests[1].endswith("test_burn.py::test_waits_on_a_busy_child"), said.stdout
    assert tests[2].endswith("test_burn.py::test_sleeps"), said.stdout
