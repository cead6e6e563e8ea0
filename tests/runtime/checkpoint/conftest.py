"""Fixtures shared by the checkpoint runtime's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.runtime.checkpoint import api as ck


@pytest.fixture
def ckenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A checkpoint dir in the environment, as a job's worker sees it (rank 0)."""
    directory = tmp_path / "ckpt"
    for key in ("RANK", "WORLD_SIZE", "DISTRAIN_RESUME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DISTRAIN_CHECKPOINT_DIR", str(directory))
    monkeypatch.setenv("DISTRAIN_JOB_ID", "job-a")
    monkeypatch.setenv("DISTRAIN_RUN_ID", "run-1")
    yield directory
    ck.wait_for_saves(raise_errors=False)
