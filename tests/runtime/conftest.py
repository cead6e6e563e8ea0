"""Fixtures of the worker runtime's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_disttrain.runtime import report, tqdm_hook


@pytest.fixture
def rank0(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rank 0 with a fresh rate limit and no explicit total yet."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(report, "_progress_sent", -report.PROGRESS_EVERY)
    monkeypatch.setattr(report, "_progress_pending", None)
    monkeypatch.setattr(report, "explicit_total", False)
    monkeypatch.setattr(tqdm_hook, "_followed", None)
    yield
