"""Job directory helpers: reading the end of a rank's log."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import jobdir


def test_a_tail_reads_from_the_end_in_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    with open(log, "w") as fh:
        for i in range(400_000):  # ~20 MB
            fh.write("##distrain {}\n" if i % 3 == 0 else f"step {i:07d} " + "x" * 40 + "\n")
    tracemalloc.start()
    try:
        last = jobdir.tail_lines(log, 5, lambda line: "##distrain" in line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [line[:12] for line in last] == [
        "step 0399992",
        "step 0399994",
        "step 0399995",
        "step 0399997",
        "step 0399998",
    ]
    assert peak < 1_000_000, f"{peak} bytes to read 5 lines of a 20 MB file"


def test_a_tail_cuts_a_huge_line_and_splits_at_newlines_only(tmp_path: Path) -> None:
    """A carriage return stays in its line: the logs read it as a terminal shows it."""
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"first\n" + b"y" * (10 * jobdir.MAX_LINE_BYTES) + b"\nbar 10%\rbar 20%\r\n\n")
    tracemalloc.start()
    try:
        last = jobdir.tail_lines(log, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert last[0].startswith("y" * 100)
    assert last[0].endswith(f"[... {9 * jobdir.MAX_LINE_BYTES} more bytes of this line cut]")
    assert last[1:] == ["bar 10%\rbar 20%\r", ""]
    assert peak < 4 * jobdir.MAX_LINE_BYTES + 2 * jobdir.TAIL_BLOCK
    assert jobdir.tail_lines(log, None)[0] == "first"  # everything: as the file says
    assert jobdir.tail_lines(log, 0) == [] and jobdir.tail_lines(tmp_path / "none", 3) == []


def test_a_tail_scans_a_bounded_part_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobdir, "MAX_SCAN_BYTES", 4096)
    log = tmp_path / "rank-0.log"
    log.write_text("a printed line\n" + "##distrain {}\n" * 1000)  # 14 KB of protocol lines
    assert (
        jobdir.tail_lines(log, 5, lambda line: "##distrain" in line) == []
    )  # not read back to the first line
    assert jobdir.tail_lines(log, None, lambda line: "##distrain" in line) == ["a printed line"]
