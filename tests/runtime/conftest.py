"""Fixtures of the worker runtime's tests."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_disttrain.runtime import jobstore, report, tqdm_hook


@pytest.fixture
def rank0(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rank 0 with a fresh rate limit and no explicit total yet."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(report, "_progress_sent", -report.PROGRESS_EVERY)
    monkeypatch.setattr(report, "_progress_pending", None)
    monkeypatch.setattr(report, "explicit_total", False)
    monkeypatch.setattr(tqdm_hook, "_followed", None)
    monkeypatch.setattr(report, "_progress_timer", None)
    yield
    timer = report._progress_timer
    if timer is not None:  # a held-back line is not sent into another test's output
        timer.cancel()
        timer.join()


@pytest.fixture
def tcp_store() -> Iterator[Any]:
    """A real torch TCPStore server on loopback (what torchrun's agent hosts for a job)."""
    dist = pytest.importorskip("torch.distributed")
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=10),
    )
    yield store
    del store


@pytest.fixture
def fresh_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every refused store value is said again (the runtime says each name once a process)."""
    monkeypatch.setattr(jobstore, "_refused", set())


@pytest.fixture(autouse=True)
def signing_key(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every runtime test's lines are signed with the tests' key (as a job's workers sign)."""
    from tests.signing import key_file

    monkeypatch.setenv("DISTRAIN_KEY_FILE", str(key_file(tmp_path_factory.mktemp("key"))))
