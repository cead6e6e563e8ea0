"""Preemption notes in the job's store are signed: a forged one stops no rank."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_disttrain.runtime import preemption
from jupyter_disttrain.runtime.jobstore import SignedStore, round_key

pytestmark = pytest.mark.usefixtures("fresh_refusals")

KEY = bytes(range(32))


def test_a_forged_stop_note_is_refused_and_a_signed_one_is_seen(
    tcp_store: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(preemption, "_signed", SignedStore(tcp_store, KEY))
    monkeypatch.setattr(preemption, "_requested", None)
    monkeypatch.setattr(preemption, "_store_seen", False)
    monkeypatch.setattr(preemption, "_store_checked", 0.0)
    tcp_store.set(round_key("preempt", "asked"), b"1")
    assert not preemption.pending()
    assert "refused distrain/preempt/0/asked" in capsys.readouterr().err
    SignedStore(tcp_store, KEY).set(round_key("preempt", "asked"), "1")
    monkeypatch.setattr(preemption, "_store_checked", 0.0)
    assert preemption.pending()
