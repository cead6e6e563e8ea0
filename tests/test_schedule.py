"""The parallel run's order (tests/schedule.py) and its table (scripts/test_durations.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.schedule import DURATIONS, ROOT, file_seconds, longest_files_first


def _items(*names: str) -> list[pytest.Item]:
    return [
        cast(pytest.Item, SimpleNamespace(path=ROOT / name, id=i)) for i, name in enumerate(names)
    ]


def test_the_longest_files_go_first_and_each_file_keeps_its_order() -> None:
    items = _items("tests/a.py", "tests/b.py", "tests/a.py", "tests/c.py", "tests/b.py")
    ordered = longest_files_first(items, {"tests/b.py": 30.0, "tests/c.py": 60.0})
    got = [(i.path.name, cast(Any, i).id) for i in ordered]
    assert got == [("c.py", 3), ("b.py", 1), ("b.py", 4), ("a.py", 0), ("a.py", 2)]


def test_the_browser_files_are_one_unit_placed_by_their_sum() -> None:
    items = _items("tests/a.py", "tests/browser/test_x.py", "tests/c.py", "tests/browser/t_y.py")
    seconds = {"tests/a.py": 50.0, "tests/browser/test_x.py": 30.0, "tests/browser/t_y.py": 30.0}
    ordered = longest_files_first(items, seconds)
    assert [cast(Any, i).id for i in ordered] == [1, 3, 0, 2]


def test_one_worker_runs_the_browser_tests_one_after_another(tmp_path: Path) -> None:
    """Under ``--dist loadfile`` the browser folder is one unit: its files' tests run in one
    worker, in order, while the other workers take the other files."""
    record = tmp_path / "ran.txt"
    body = (
        "import os, time\n\n\ndef test_{name}():\n"
        "    with open({record!r}, 'a') as out:\n"
        "        out.write(f\"{name} {{os.environ['PYTEST_XDIST_WORKER']}}\\n\")\n"
        "    time.sleep(0.3)\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for folder, names in (("tests/browser", "b1 b2 b3"), ("tests", "o1 o2 o3 o4")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        for name in names.split():
            text = body.format(name=name, record=str(record))
            (tmp_path / folder / f"test_{name}.py").write_text(text)
    plugins = ["-p", "tests.schedule", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-n", "2", "--dist", "loadfile", "tests"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in record.read_text().splitlines()]
    ran = dict(lines)
    assert len(ran) == 7, lines
    assert len({ran["b1"], ran["b2"], ran["b3"]}) == 1, lines
    assert [name for name, _ in lines if name.startswith("b")] == ["b1", "b2", "b3"], lines
    assert len(set(ran.values())) == 2, lines


def test_the_checked_in_table_names_existing_test_files() -> None:
    table = file_seconds(DURATIONS)
    assert table, "tests/durations.json is missing or empty"
    missing = [name for name in table if not (ROOT / name).is_file()]
    assert not missing, f"run scripts/test_durations.py: gone from tests/: {missing}"


#: The table both reports below give (files of under 5 s and files not in the tree left out).
EXPECTED = {
    "tests/backends/local/test_backend.py": 9.0,
    "tests/test_schedule.py": 7.5,
    "notebooks/01-quickstart.ipynb": 6.0,
}


def table_of(report: Path) -> dict[str, float]:
    """The ``files`` table scripts/test_durations.py writes from ``report``."""
    target = report.with_name("durations.json")
    script = ROOT / "scripts" / "test_durations.py"
    done = subprocess.run(
        [sys.executable, str(script), str(report), "--out", str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    files: dict[str, float] = json.loads(target.read_text())["files"]
    return files


def test_the_table_is_written_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_schedule" name="a" time="4.0"/>'
        '<testcase classname="tests.test_schedule" name="b" time="3.5"/>'
        '<testcase classname="tests.backends.local.test_backend.TestX" name="c" time="9"/>'
        '<testcase classname="tests.test_spec" name="d" time="0.1"/>'
        '<testcase classname="notebooks.01-quickstart.ipynb" name="Cell 0" time="6"/>'
        "</testsuite></testsuites>"
    )
    assert table_of(report) == EXPECTED


def test_the_table_is_read_from_the_first_durations_list_of_a_make_test_log(
    tmp_path: Path,
) -> None:
    log = tmp_path / "test.log"
    log.write_text(
        "........ [100%]\n"
        "============================== slowest durations ===============================\n"
        "9.00s call     tests/backends/local/test_backend.py::test_x[exec]\n"
        "4.00s call     tests/test_schedule.py::test_a\n"
        "3.50s setup    tests/test_schedule.py::test_a\n"
        "5.50s call     notebooks/01-quickstart.ipynb::Cell 2\n"
        "0.50s call     notebooks/01-quickstart.ipynb::Cell 3\n"
        "7.00s call     tests/gone.py::test_y\n"
        "\n(12 durations < 0.005s hidden.)\n"
        "======================= 5 passed in 20.00s =======================\n"
        "============================== slowest durations ===============================\n"
        "60.00s call     tests/test_spec.py::test_serial\n"
    )
    assert table_of(log) == EXPECTED


def test_a_serial_mark_set_outside_the_tests_file_is_refused(tmp_path: Path) -> None:
    """`make test`'s serial run collects the files that say ``mark.serial``: a serial mark
    set from anywhere else (a conftest) stops the run, in the parallel run too."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n")
    (tmp_path / "test_said.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.serial\n\n\ndef test_a():\n    pass\n"
    )
    (tmp_path / "test_unsaid.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if item.name == 'test_b':\n"
        "            item.add_marker(pytest.mark.serial)\n"
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        plugins = ["-p", "tests.schedule", "-p", "no:cacheprovider"]
        return subprocess.run(
            [sys.executable, "-m", "pytest", *plugins, *args, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    for marks in ("serial", "not serial"):
        done = run("-m", marks)
        assert done.returncode != 0, done.stdout
        assert "test_unsaid.py::test_b is marked serial from outside its file" in (
            done.stdout + done.stderr
        ), done.stdout + done.stderr
    (tmp_path / "conftest.py").unlink()
    done = run("-m", "serial")
    assert done.returncode == 0 and "1 passed, 1 deselected" in done.stdout, done.stdout
