"""A file replaced whole: the new content, owner-only, and nothing left behind on failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.runtime.files import replace_file


def test_a_file_is_replaced_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    replace_file(path, b"new", durable=True)
    assert path.read_bytes() == b"new" and path.stat().st_mode & 0o777 == 0o600
    replace_file(path, b"newer", prefix=".view-")
    assert path.read_bytes() == b"newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_replace_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("x")  # a directory cannot be replaced by a file
    with pytest.raises(OSError):
        replace_file(target, b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
