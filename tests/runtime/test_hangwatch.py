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
    assert other.store is not None
    tcp_store.set(round_key("where", "asked"), b"3")
    tcp_store.set(round_key("where", "hang"), json.dumps({"n": 1, "quiet": 1.0}).encode())
    tcp_store.add(round_key("where", "hangs"), 5)  # the old counter means nothing now
    tcp_store.add(round_key("where", "changed"), 1)  # anyone may move it: it only says "read"
    assert other._read_store(other.store) == []
    assert "refused distrain/where/0/asked" in capsys.readouterr().err
    signer = SignedStore(tcp_store, KEY)
    signer.set(round_key("where", "asked"), "3")
    signer.set(round_key("where", "hang"), json.dumps({"n": 1, "quiet": 12.5}))
    assert other._read_store(other.store) == []  # not read again until the counter moves
    signer.add(round_key("where", "changed"), 1)
    assert other._read_store(other.store) == [
        ("a3", {"reason": "asked"}),
        ("h1", {"reason": "hang", "quiet": 12.5}),
    ]


class CountingStore:
    """A store that counts the round trips asked of it."""

    def __init__(self, store: Any) -> None:
        self.store, self.calls = store, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return method(*args, **kwargs)

        return counted


def test_a_quiet_tick_of_a_rank_reads_one_counter_and_a_request_reaches_it(
    tcp_store: Any, tmp_path: Any
) -> None:
    """Rank 0 passes a stacks request from its file on; rank 1's ticks read the change
    counter alone until then, and the request once it moved."""
    counted = CountingStore(tcp_store)
    other = watch(counted, 1)
    assert other.store is not None
    assert other._read_store(other.store) == []  # the first tick reads everything
    counted.calls = 0
    for _ in range(5):
        assert other._read_store(other.store) == []
    assert counted.calls == 5  # one round trip a tick: the counter
    zero = watch(tcp_store, 0)
    assert zero.store is not None
    zero.file = str(tmp_path / hangwatch.REQUEST_FILE)
    (tmp_path / hangwatch.REQUEST_FILE).write_text("2")
    zero._pass_on(zero.store)
    assert other._read_store(other.store) == [("a2", {"reason": "asked"})]


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


def test_the_silent_ranks_of_a_hung_node_cost_a_few_requests_not_one_per_rank(
    tcp_store: Any,
) -> None:
    """Rank 0 gathers 1,024 ranks' stacks where node 5 (ranks 40-47) never answers and one
    rank's answer is forged: every signed answer is read, in far fewer round trips than
    one per rank, and the silent and forged ranks stay pending."""
    signed = SignedStore(tcp_store, KEY)
    silent = set(range(40, 48))
    for rank in set(range(1024)) - silent - {700}:
        signed.set(round_key("where", f"h1/{rank}"), json.dumps({"rank": rank}))
    tcp_store.set(round_key("where", "h1/700"), b'{"forged": true}')
    counted = CountingStore(tcp_store)
    pending = set(range(1024))
    found = hangwatch.gather(SignedStore(counted, KEY), "h1", pending)
    assert sorted(rank for rank, _ in found) == sorted(set(range(1024)) - silent - {700})
    assert all(json.loads(value) == {"rank": rank} for rank, value in found)
    assert pending == silent | {700}
    assert counted.calls <= 40, counted.calls  # 4 chunks; ~12 checks round the silent node
    counted.calls = 0
    assert hangwatch.gather(SignedStore(counted, KEY), "h1", pending) == []
    assert counted.calls <= 2 * len(pending), counted.calls
