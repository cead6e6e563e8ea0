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


# --- the job-wide metric budget --------------------------------------------------------------
def metric_steps(lines: list[str], rank: int, trust_world: tuple[int, int] = (2, 4)) -> list[int]:
    events = [line_events(text, rank, signing.trust(*trust_world))[0] for text in lines]
    return [int(e.fields["step"]) for e in events if e.kind == "metric"]


def test_the_budget_is_each_senders_share_of_the_job_wide_rate() -> None:
    assert relay.metric_budget(8184, 2.0) == 3  # 8,192 ranks: one a second each (ceil 2.002)
    assert relay.metric_budget(1, 0.3) == 2458
    assert relay.metric_budget(100_000, 0.1) == 1  # never none


def test_a_rank_over_its_budget_keeps_power_of_two_steps_and_its_last_others_untouched() -> None:
    fast = [signing.line("metric", 5, step=s, values={"loss": 1.0}) for s in range(40)]
    slow = [signing.line("metric", 6, step=s, values={"loss": 1.0}) for s in range(3)]
    other = [signing.line("progress", 5, done=1, total=9), "plain text"]
    lines = fast[:20] + other[:1] + slow + fast[20:] + other[1:]
    kept = relay.thinned(lines, budget=4)
    assert metric_steps([k for k in kept if '"rank":5' in k], 5) == [0, 16, 32, 39]  # stride 16
    assert [k for k in kept if '"rank":6' in k] == slow  # within its budget: all of them
    assert [k for k in kept if k in other] == other  # in order, never thinned
    assert relay.thinned(lines, budget=40) == lines


def test_ranks_reporting_alike_keep_the_same_steps() -> None:
    """So the notebook's per-step band across ranks stays exact at the steps kept."""
    batch = [
        signing.line("metric", rank, step=s, values={"loss": 1.0})
        for s in range(100, 130)
        for rank in (3, 4, 7)
    ]
    kept = relay.thinned(batch, budget=3)
    by_rank = {r: metric_steps([k for k in kept if f'"rank":{r},' in k], r) for r in (3, 4, 7)}
    assert by_rank[3] == by_rank[4] == by_rank[7] == [112, 128, 129], by_rank  # stride 16


def test_a_large_jobs_fast_rank_is_thinned_on_its_way_to_rank_zero(
    tcp_store: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """8,192 senders: a rank reporting 40 times in one batch (a 2 s tick) sends ~3 of them,
    its last among them; rank 0 writes what came, and the rank's own log keeps the rest."""
    monkeypatch.setenv(jobkey.ENV_KEY_FILE, str(signing.key_file(tmp_path)))
    sender = relay._Relay(SignedStore(tcp_store, KEY), rank=9, senders=8184)
    reader = relay._Relay(SignedStore(tcp_store, KEY), rank=0, senders=8184)
    for s in range(40):
        sender.tap(signing.line("metric", 9, step=s, values={"loss": 1 / (s + 1)}) + "\n")
    sender.flush()
    reader.drain()
    [written] = capsys.readouterr().out.splitlines()
    events = line_events(written, 0, signing.trust(1024, 8))
    assert [int(e.fields["step"]) for e in events] == [0, 16, 32, 39], written
