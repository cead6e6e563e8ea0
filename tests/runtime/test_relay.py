"""The relay's batches through a real TCPStore: sealed, checked, and bounded against forged
counters (another local user can reach the job's store)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.streams import line_events
from jupyter_disttrain.runtime import jobkey, relay
from jupyter_disttrain.runtime.jobstore import SignedStore, round_key
from tests import signing

pytestmark = pytest.mark.usefixtures("fresh_refusals")

KEY = bytes(range(32))


def test_a_batch_is_sealed_and_reaches_rank_zeros_log(
    tcp_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    sender = relay._Relay(SignedStore(tcp_store, KEY), rank=2, senders=1)
    reader = relay._Relay(SignedStore(tcp_store, KEY), rank=0, senders=1)
    sender.tap('DISTRAIN {"kind": "metric", "secret": "s3cr3t-token"}\n')
    sender.flush()
    assert b"s3cr3t-token" not in tcp_store.get(round_key("relay", "m1"))
    reader.drain()
    assert '"secret": "s3cr3t-token"' in capsys.readouterr().out


def test_rank_zero_writes_the_relayed_metrics_of_a_batch_in_one_line_that_reads_back_whole(
    tcp_store: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(jobkey.ENV_KEY_FILE, str(signing.key_file(tmp_path)))
    sender = relay._Relay(SignedStore(tcp_store, KEY), rank=5, senders=1)
    reader = relay._Relay(SignedStore(tcp_store, KEY), rank=0, senders=1)
    sent = [signing.line("metric", 5, step=s, values={"loss": 1 / (s + 1)}) for s in range(20)]
    for text in sent:
        sender.tap(text + "\n")
    sender.flush()
    reader.drain()
    [written] = capsys.readouterr().out.splitlines()
    events = line_events(written, 0, signing.trust(2, 4))
    expected = [line_events(text, 5, signing.trust(2, 4))[0] for text in sent]
    assert [(e.kind, e.rank, e.t, e.fields) for e in events] == [
        (e.kind, e.rank, e.t, e.fields) for e in expected
    ], written


def test_a_forged_batch_is_never_written_and_the_real_one_after_it_is(
    tcp_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    reader = relay._Relay(SignedStore(tcp_store, KEY), rank=0, senders=1)
    sender = relay._Relay(SignedStore(tcp_store, KEY), rank=1, senders=1)
    tcp_store.add(round_key("relay", "seq"), 1)
    tcp_store.set(round_key("relay", "m1"), b'DISTRAIN {"kind": "job", "state": "Failed"}')
    sender.tap("DISTRAIN real line")
    sender.flush()
    started = time.monotonic()
    reader.drain(deadline=time.monotonic() + 1.0)
    assert time.monotonic() - started < 3.0
    captured = capsys.readouterr()
    assert "Failed" not in captured.out and "DISTRAIN real line" in captured.out
    assert "failed verification with the job key" in captured.err


def test_a_forged_counter_jump_costs_one_bounded_wait_and_skips(
    tcp_store: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "MAX_GAP", 50)
    monkeypatch.setattr(relay, "MISSING_SECONDS", 0.5)
    reader = relay._Relay(SignedStore(tcp_store, KEY), rank=0, senders=1)
    sender = relay._Relay(SignedStore(tcp_store, KEY), rank=1, senders=1)
    tcp_store.add(round_key("relay", "seq"), 10**12)  # no batch has any of these numbers
    sender.tap("DISTRAIN after the jump")
    sender.flush()
    started = time.monotonic()
    reader.drain()
    took = time.monotonic() - started
    assert took < 0.5 + 3.0, took  # one missing-batch wait, not one per number
    captured = capsys.readouterr()
    assert "DISTRAIN after the jump" in captured.out
    assert "the batch counter jumped" in captured.err
    assert reader.next == 10**12 + 2
