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


@pytest.fixture(autouse=True)
def signing_key(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every runtime test's lines are signed with the tests' key (as a job's workers sign)."""
    from tests.signing import key_file

    monkeypatch.setenv("DISTRAIN_KEY_FILE", str(key_file(tmp_path_factory.mktemp("key"))))
