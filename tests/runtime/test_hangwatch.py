"""The hang watch's store requests are signed: a forged one asks nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_disttrain.runtime import hangwatch
from jupyter_disttrain.runtime.jobstore import SignedStore, round_key

pytestmark = pytest.mark.usefixtures("fresh_refusals")

KEY = bytes(range(32))


def watch(store: Any, rank: int) -> hangwatch._Watch:
    w = hangwatch._Watch(rank, 2, None, hang=10.0)
    w.store = SignedStore(store, KEY)
    return w


def test_forged_requests_are_refused_and_signed_ones_are_served(
    tcp_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    other = watch(tcp_store, 1)
    tcp_store.set(round_key("where", "asked"), b"3")
    tcp_store.set(round_key("where", "hang"), json.dumps({"n": 1, "quiet": 1.0}).encode())
    tcp_store.add(round_key("where", "hangs"), 5)  # the old counter means nothing now
    assert other._requests() == []
    assert "refused distrain/where/0/asked" in capsys.readouterr().err
    signer = SignedStore(tcp_store, KEY)
    signer.set(round_key("where", "asked"), "3")
    signer.set(round_key("where", "hang"), json.dumps({"n": 1, "quiet": 12.5}))
    assert other._requests() == [
        ("a3", {"reason": "asked"}),
        ("h1", {"reason": "hang", "quiet": 12.5}),
    ]


def test_rank_zero_gathers_only_signed_stacks(
    tcp_store: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hangwatch, "GATHER_SECONDS", 0.5)
    zero = watch(tcp_store, 0)
    tcp_store.set(round_key("where", "a1/1"), b'{"forged": true}')
    zero._serve("a1", {"reason": "asked"})
    out = capsys.readouterr().out
    assert '"rank":0' in out and "forged" not in out and out.count('"kind":"stacks"') == 1
    SignedStore(tcp_store, KEY).set(round_key("where", "a2/1"), json.dumps({"request": "a2"}))
    zero._serve("a2", {"reason": "asked"})
    out = capsys.readouterr().out
    assert out.count('"kind":"stacks"') == 2 and '"rank":1' in out and '"request":"a2"' in out
