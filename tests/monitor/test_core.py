"""JobMonitor state from recorded event streams (tests/data/events/*.jsonl)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from jupyter_disttrain.events import Event, job_event, rank_event, restart_event
from jupyter_disttrain.monitor import JobMonitor, format_text
from tests.conftest import REPO
from tests.widgets.streams import recorded, upto

EVENTS = REPO / "tests" / "data" / "events"
T0 = 1_700_000_000.0


def state_of(mon: JobMonitor) -> str:
    """The job state (a call, so mypy does not narrow it across feeds)."""
    return mon.state


def metric(rank: int, t: float, step: int, **values: float) -> Event:
    return Event("metric", rank, t, {"step": step, "values": values})


def hello(rank: int, t: float, **fields: object) -> Event:
    return Event("hello", rank, t, {"backend": "gloo", "host": "h", "pid": 10 + rank, **fields})


# --------------------------------------------------------------------------- restart_recovery


@pytest.fixture
def restart_events() -> list[Event]:
    return recorded("restart_recovery")


def test_restart_stream_before_crash_is_running(restart_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(upto(restart_events, "error"))
    assert state_of(mon) == "Running"
    assert [r.state for r in mon.ranks()] == ["Running"] * 4
    assert mon.dist_backend == "gloo"
    assert mon.first_failure() is None
    row = mon.rank(3)
    assert row is not None
    assert (row.node, row.local_rank, row.host, row.pid) == (1, 1, "node1", 1003)
    assert row.versions == {"python": "3.11.7", "torch": "2.4.0"}
    assert row.step == 30


def test_restart_stream_crash_fails_then_restarts(restart_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(upto(restart_events, "restart"))
    assert state_of(mon) == "Failed"
    assert mon.first_failure() == (2, "RuntimeError: CUDA error: an illegal memory access")
    row = mon.rank(2)
    assert row is not None
    assert (row.state, row.exit_code) == ("Failed", 1)
    assert row.reason == "RuntimeError: CUDA error: an illegal memory access"
    assert mon.elapsed() == pytest.approx(6.5)  # the first failure ends the clock

    rest = restart_events[len(upto(restart_events, "restart")) :]
    mon.feed(rest[0])
    assert state_of(mon) == "Restarting"
    assert mon.restarts == 1
    assert {r.state for r in mon.ranks()} == {"Restarting"}
    assert [r.step for r in mon.ranks()] == [None] * 4  # new processes report afresh
    assert mon.snapshot(now=T0)["step"] == 30  # the highest step reached stays
    mon.feed(rest[1])  # the first hello of the new attempt
    assert state_of(mon) == "Running"
    assert [r.state for r in mon.ranks()] == ["Running"] + ["Restarting"] * 3
    assert mon.first_failure() is None  # the failure belongs to the previous attempt
    assert [f.rank for f in mon.failures()] == [2, 2]


def test_a_failure_with_a_restart_left_reads_restarting_until_the_ranks_run_again(
    restart_events: list[Event],
) -> None:
    """--max-restarts 1: torchrun restarts the ranks after the crash, so the job never reads
    Failed; its reason names what it restarts after; it ends as without the budget."""
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2, max_restarts=1)
    before = upto(restart_events, "restart")
    seen = set()
    for event in before:
        mon.feed(event)
        seen.add(state_of(mon))
    assert seen == {"Pending", "Running", "Restarting"}, seen  # never Failed
    assert mon.reason == (
        "restarting after rank 2: RuntimeError: CUDA error: an illegal memory access; "
        "3 ranks stopped as a consequence"
    )
    assert mon.ended is False
    mon.feed_many(restart_events[len(before) :])
    assert state_of(mon) == "Succeeded" and mon.restarts == 1
    plain = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    plain.feed_many(restart_events)
    assert [c.line() for c in mon.recovered()] == [c.line() for c in plain.recovered()]
    assert [(r.state, r.restarts) for r in mon.ranks()] == [("Succeeded", 1)] * 4


def test_a_failure_with_no_restart_left_fails(restart_events: list[Event]) -> None:
    """The budget spent (a second failure after one restart of one): Failed, as without one."""
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2, max_restarts=1)
    rest = restart_events[len(upto(restart_events, "restart")) :]
    mon.feed_many(upto(restart_events, "restart"))
    mon.feed_many(rest[:2])  # the restart, the first hello of the new attempt
    assert state_of(mon) == "Running"
    mon.feed(Event("error", 1, T0 + 9.0, {"type": "ValueError", "message": "bad again"}))
    assert state_of(mon) == "Failed"
    assert mon.reason.startswith("rank 1: ValueError: bad again"), mon.reason


def test_restart_stream_final_state(restart_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(restart_events)
    assert state_of(mon) == "Succeeded"
    assert mon.restarts == 1
    assert mon.elapsed(now=T0 + 999) == pytest.approx(14.0)
    rows = mon.ranks()
    assert [(r.state, r.restarts, r.exit_code, r.step) for r in rows] == [
        ("Succeeded", 1, 0, 60)
    ] * 4
    assert rows[0].pid == 2000  # from the second hello
    # 60 steps between the first metric (T0+3) and the one reaching step 60 (T0+13)
    assert mon.steps_per_second() == pytest.approx(6.0)
    assert rows[0].step_rate == pytest.approx(10.0)  # since the restart: 40 steps in 4 s
    assert [(c.step, c.uri, c.bytes, c.rank) for c in mon.checkpoints()] == [
        (20, "file:///ckpt/step-20", 4096, 0),
        (60, "file:///ckpt/step-60", 8192, 0),
    ]
    result = mon.result()
    assert result is not None
    assert (result.rank, result.get("encoding")) == (0, "cloudpickle")
    errors = mon.errors()
    assert [(e.rank, e.type) for e in errors] == [(2, "RuntimeError")]
    assert errors[0].traceback.endswith("illegal memory access")
    assert mon.stragglers() == []


def test_restart_stream_metric_series(restart_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(restart_events)
    assert mon.metric_names() == ["loss", "lr"]
    assert mon.metric_ranks("loss") == [0, 1, 2, 3]
    steps, times, values = mon.series("loss", 0)
    assert steps.tolist() == [0, 10, 20, 30, 20, 30, 40, 50, 60]
    assert times[0] == pytest.approx(T0 + 3.0)
    assert values[2] == pytest.approx(1.8) and values[4] == pytest.approx(1.7)
    dedup = mon.series("loss", 0, by_step=True)
    assert dedup.steps.tolist() == [0, 10, 20, 30, 40, 50, 60]
    assert dedup.values[2] == pytest.approx(1.7)  # the replayed step keeps its latest value

    mean_steps, means = mon.mean_series("loss")
    assert mean_steps.tolist() == [0, 10, 20, 30, 40, 50, 60]
    np.testing.assert_allclose(means[[0, 2, 6]], [2.0015, 1.7015, 1.3015])

    table = mon.metrics_table()
    assert len(table) == 36
    assert table[0] == {"rank": 0, "step": 0, "t": T0 + 3.0, "loss": 2.0, "lr": 0.1}
    assert table[-1]["rank"] == 3 and table[-1]["step"] == 60
    assert table[-1]["lr"] == 0.05
    cols = mon.metrics_columns()
    assert cols["rank"].tolist() == [row["rank"] for row in table]
    np.testing.assert_allclose(cols["loss"], [row["loss"] for row in table])

    assert mon.series("nope", 0).steps.size == 0
    assert mon.series("loss", 9).values.size == 0


def test_restart_stream_logs_fold(restart_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(restart_events)
    labels = [entry.label() for entry in mon.folded_logs()]
    assert labels == [
        "[ranks 0-3] step 0 done",
        "[ranks 0-3] step 10 done",
        "[ranks 0-3] step 20 done",
        "[ranks 0-3] step 30 done",
        "[ranks 0-3] training finished",
    ]
    assert mon.log_divergence() is None
    assert [line.rank for line in mon.log_lines(search="FINISHED")] == [3, 1, 2, 0]


def test_restart_stream_snapshot_and_text(restart_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(restart_events)
    snap = mon.snapshot(now=T0 + 20)
    json.dumps(snap, allow_nan=False)  # strictly JSON-able
    assert snap["state"] == "Succeeded"
    assert (snap["world_size"], snap["nodes"], snap["nproc"]) == (4, 2, 2)
    assert snap["elapsed"] == pytest.approx(14.0)
    assert snap["step"] == 60
    assert snap["restarts"] == 1
    assert snap["has_result"] is True
    assert snap["first_failure"] is None
    assert snap["metrics"]["loss"]["step"] == 60
    assert snap["metrics"]["loss"]["mean"] == pytest.approx(1.3015)
    assert snap["metrics"]["loss"]["ranks"] == 4
    assert snap["ranks"][2]["latest"]["lr"] == 0.05
    assert snap["ranks"][0]["silent_s"] == pytest.approx(20 - 13.4)
    assert [c["step"] for c in snap["checkpoints"]] == [20, 60]
    assert snap["logs"] == {"kept": 20, "total": 20, "dropped": 0}
    assert snap["version"] == len(restart_events)

    text = format_text(snap)
    lines = text.splitlines()
    assert lines[0] == (
        "job [local/gloo] Succeeded | 14.0s | world 4 (2x2) | step 60 | 6 steps/s | 1 restart"
    )
    assert "rank  node  host   state      restarts  step  steps/s  heard     exit" in lines
    assert "2     1     node1  Succeeded  1         60    10       6.6s ago  exit 0" in lines
    assert any(line.startswith("3     1     node1  Succeeded  1         60") for line in lines)
    assert "  loss 1.3015 (step 60, 4 ranks, min 1.3, max 1.303)" in lines
    assert "checkpoints: 2, latest step 60: file:///ckpt/step-60, 8.0 KB" in lines
    # the recovered failure is history, not a current error
    assert (
        "  recovered from 1 failure (rank 2: RuntimeError: CUDA error: an illegal memory access)"
        in lines
    )
    assert "errors:" not in lines


# --------------------------------------------------------------------------- oom_straggler


@pytest.fixture
def oom_events() -> list[Event]:
    return recorded("oom_straggler")


def test_oom_stream_straggler_before_failure(oom_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=1, nproc=4)
    mon.feed_many(upto(oom_events, "error"))
    assert state_of(mon) == "Running"
    assert mon.dist_backend == "nccl"
    # steps 100, 100, 100, 60: median 100, allowed lag max(10, 20) = 20
    assert mon.stragglers() == [3]
    rows = mon.ranks()
    assert rows[3].step_rate == pytest.approx(6.0)
    assert rows[0].step_rate == pytest.approx(10.0)
    snap = mon.snapshot(now=T0 + 13)
    assert snap["stragglers"] == [3]
    assert "stragglers: ranks 3" in format_text(snap)


def test_oom_stream_first_failure_is_earliest_by_time(oom_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=1, nproc=4)
    mon.feed_many(upto(oom_events, "job", 2))  # up to the backend's Failed
    assert state_of(mon) == "Failed"
    # rank 0's NCCL error arrived first but happened after rank 1 was OOM-killed
    assert mon.first_failure() == (1, "OOMKilled (exit code 137)")
    assert [f.rank for f in mon.failures()] == [0, 1]


def test_oom_stream_backend_failure_is_final(oom_events: list[Event]) -> None:
    mon = JobMonitor("job", "local", 4, nodes=1, nproc=4)
    mon.feed_many(oom_events)
    assert state_of(mon) == "Failed"
    assert mon.elapsed(now=T0 + 100) == pytest.approx(15.0)
    rows = mon.ranks()
    # rank 0's watchdog timeout is a consequence of rank 1's OOM kill
    assert [(r.state, r.exit_code) for r in rows] == [
        ("Stopped", 1),
        ("Failed", 137),
        ("Stopped", -15),
        ("Stopped", -15),
    ]
    assert rows[0].reason == "DistBackendError: NCCL watchdog timeout"
    assert rows[1].reason == "OOMKilled (exit code 137)"
    assert mon.first_failure() == (1, "OOMKilled (exit code 137)")
    # teardown exits after the backend's verdict are not failures
    assert [f.rank for f in mon.failures()] == [0, 1]
    # derived facts cannot undo the backend's terminal state
    mon.feed(hello(2, T0 + 16))
    mon.feed(Event("done", 3, T0 + 16, {"seconds": 1.0}))
    assert state_of(mon) == "Failed"
    assert [r.state for r in mon.ranks()] == ["Stopped", "Failed", "Stopped", "Succeeded"]
    snap = mon.snapshot(now=T0 + 20)
    assert snap["reason"] == "WorkerFailed"
    assert snap["first_failure"] == {
        "rank": 1,
        "t": T0 + 14.0,
        "reason": "OOMKilled (exit code 137)",
    }
    text = format_text(snap)
    assert "  rank 1: OOMKilled (exit code 137); 2 ranks stopped as a consequence" in text
    assert "WorkerFailed" not in text  # the backend's words give way to the cause
    assert "exit 137: OOMKilled" not in text and "OOMKilled (exit code 137)\n" in text
    # the cause left no traceback: the consequence's is not shown as if it were one
    assert text.rstrip().endswith("  rank 0 (consequence): DistBackendError: NCCL watchdog timeout")


# --------------------------------------------------------------------------- synthetic


def test_rows_default_to_nproc_layout() -> None:
    mon = JobMonitor("j", "kubernetes", 6, nodes=3, nproc=2)
    assert [(r.rank, r.node, r.local_rank, r.state) for r in mon.ranks()] == [
        (0, 0, 0, "Pending"),
        (1, 0, 1, "Pending"),
        (2, 1, 0, "Pending"),
        (3, 1, 1, "Pending"),
        (4, 2, 0, "Pending"),
        (5, 2, 1, "Pending"),
    ]
    mon.feed(rank_event(4, "Running", host="pod-worker-1", node=7, t=T0))
    mon.feed(Event("rank", 5, T0, {"state": "Pending", "pod": "pj-worker-2"}))
    row4, row5 = mon.rank(4), mon.rank(5)
    assert row4 is not None and row5 is not None
    assert (row4.state, row4.node, row4.host) == ("Running", 7, "pod-worker-1")
    assert row5.pod == "pj-worker-2"
    assert state_of(mon) == "Pending"  # a pod running is not yet a training job


def test_straggler_thresholds() -> None:
    mon = JobMonitor("j", "local", 5)
    steps = {0: 100, 1: 100, 2: 100, 3: 80, 4: 79}
    for r, step in steps.items():
        mon.feed(hello(r, T0))
        mon.feed(metric(r, T0 + 1, step, loss=1.0))
    # median 100, allowed max(10, 0.2 * 100) = 20: 80 is fine, 79 is behind by 21
    assert mon.stragglers() == [4]
    small = JobMonitor("j", "local", 3, straggler_steps=5, straggler_fraction=0.5)
    for r, step in {0: 20, 1: 20, 2: 9}.items():
        small.feed(hello(r, T0))
        small.feed(metric(r, T0 + 1, step, loss=1.0))
    assert small.stragglers() == [2]  # allowed max(5, 10) = 10, behind by 11
    small.feed(Event("done", 2, T0 + 2))
    assert small.stragglers() == []  # only Running ranks count


def test_step_rate_uses_recent_window() -> None:
    mon = JobMonitor("j", "local", 1, rate_window=10.0)
    mon.feed(hello(0, T0))
    for i in range(21):  # 1 step/s for 20 s
        mon.feed(metric(0, T0 + i, i, loss=1.0))
    for i in range(1, 11):  # then 5 steps/s for 10 s
        mon.feed(metric(0, T0 + 20 + i, 20 + 5 * i, loss=1.0))
    row = mon.rank(0)
    assert row is not None
    assert row.step_rate == pytest.approx(5.0)
    assert mon.steps_per_second() == pytest.approx(70 / 30)
    assert row.silent_for(T0 + 42.5) == pytest.approx(12.5)
    assert mon.silent_ranks(after=10, now=T0 + 42.5) == [0]
    assert mon.silent_ranks(after=20, now=T0 + 42.5) == []


def test_all_done_derives_success_and_second_hello_counts_restart() -> None:
    mon = JobMonitor("j", "local", 2)
    mon.feed_many([hello(0, T0 + 1), hello(1, T0 + 1)])
    mon.feed(rank_event(1, "Exited", exit_code=1, t=T0 + 2))
    assert state_of(mon) == "Failed"
    mon.feed(hello(0, T0 + 2.5))  # a late hello from a healthy rank
    assert state_of(mon) == "Failed"
    mon.feed(hello(1, T0 + 3))  # rank 1 came back on its own (no job restart)
    assert state_of(mon) == "Running"
    rows = mon.ranks()
    assert [(r.restarts, r.exit_code, r.reason) for r in rows] == [(1, None, ""), (1, None, "")]
    mon.feed_many([Event("done", 0, T0 + 4), Event("done", 1, T0 + 5)])
    assert state_of(mon) == "Succeeded"
    assert mon.elapsed() == pytest.approx(4.0)


def test_explicit_job_states_and_stop() -> None:
    mon = JobMonitor("j", "local", 2)
    mon.feed_many([job_event("Pending", t=T0), hello(0, T0 + 1), hello(1, T0 + 1)])
    assert state_of(mon) == "Running"
    mon.feed(job_event("Stopped", reason="UserStop", t=T0 + 5))
    assert state_of(mon) == "Stopped"
    mon.feed(rank_event(0, "Exited", exit_code=-15, t=T0 + 5.5))
    row = mon.rank(0)
    assert row is not None and (row.state, row.exit_code) == ("Stopped", -15)
    assert mon.failures() == [] and mon.first_failure() is None
    mon.feed(restart_event(1, t=T0 + 6))
    assert state_of(mon) == "Stopped"
    mon.feed(job_event("Running", t=T0 + 7))  # another explicit state always applies
    assert state_of(mon) == "Running"
    assert mon.elapsed(now=T0 + 10) == pytest.approx(10.0)


def test_metric_values_non_numeric_and_nan() -> None:
    mon = JobMonitor("j", "local", 2)
    mon.feed(metric(0, T0, 1, loss=float("nan"), acc=0.5))
    mon.feed(Event("metric", 1, T0, {"step": 1, "values": {"loss": 1.0, "tag": "x", "n": None}}))
    mon.feed(Event("metric", 1, T0, {"step": "bad", "values": {"loss": 1.0}}))
    assert mon.metric_names() == ["loss", "acc"]
    snap = mon.snapshot(now=T0)
    json.dumps(snap, allow_nan=False)
    assert snap["metrics"]["loss"]["mean"] == "NaN"
    assert snap["ranks"][0]["latest"] == {"loss": "NaN", "acc": 0.5}
    assert snap["ranks"][1]["latest"] == {"loss": 1.0}
    steps, means = mon.mean_series("loss")
    assert steps.tolist() == [1.0] and np.isnan(means[0])
    assert mon.metrics_table()[1] == {"rank": 1, "step": 1, "t": T0, "loss": 1.0}
    assert "loss nan (step 1, 2 ranks, min nan, max nan)" in format_text(snap)


def test_points_since_is_incremental() -> None:
    mon = JobMonitor("j", "local", 1)
    for step in range(5):
        mon.feed(metric(0, T0 + step, step, loss=float(step)))
    first = mon.points_since("loss", 0, 0)
    index = len(first.steps)
    assert index == mon.series_length("loss", 0) == 5
    version = mon.version
    mon.feed_many(metric(0, T0 + s, s, loss=float(s)) for s in (5, 6))
    assert mon.version == version + 2
    more = mon.points_since("loss", 0, index)
    assert more.steps.tolist() == [5, 6] and more.values.tolist() == [5.0, 6.0]
    assert mon.points_since("loss", 0, 7).steps.size == 0
    # copies: mutating a result does not touch the monitor
    more.values[:] = -1
    assert mon.series("loss", 0).values[-1] == 6.0


def test_hello_world_size_resizes_rows() -> None:
    mon = JobMonitor("j", "local", 4)
    mon.feed(hello(0, T0, world_size=2))
    assert mon.world_size == 2
    assert [r.rank for r in mon.ranks()] == [0, 1]


def test_log_limit_and_job_wide_lines() -> None:
    mon = JobMonitor("j", "local", 1, log_limit=3)
    for i in range(5):
        mon.feed(Event("log", 0, T0 + i, {"text": f"line {i}"}))
    mon.feed(Event("log", None, T0 + 9, {"text": "scheduling pod"}))
    assert [line.text for line in mon.log_lines()] == [
        "line 2",
        "line 3",
        "line 4",
        "scheduling pod",
    ]
    assert mon.log_lines(ranks=[-1])[0].rank == -1
    assert mon.snapshot(now=T0)["logs"] == {"kept": 4, "total": 6, "dropped": 2}
    row = mon.rank(0)
    assert row is not None and row.last_heard == T0 + 4


def test_large_format_text_shows_attention_ranks_first() -> None:
    mon = JobMonitor("big", "kubernetes", 100, nodes=25, nproc=4)
    for r in range(100):
        mon.feed(hello(r, T0))
    mon.feed(Event("error", 77, T0 + 1, {"type": "ValueError", "message": "bad"}))
    text = format_text(mon.snapshot(now=T0 + 2), max_rows=5)
    table = [line for line in text.splitlines() if line[:1].isdigit()]
    assert [line.split()[0] for line in table] == ["77"]  # a large job: only the rank that differs
    assert "ranks: 99 Running (ranks 0-76, 78-99); 1 Failed (rank 77)" in text
    assert "... and 99 more ranks as summarised" in text


def test_feed_while_reading_from_another_thread() -> None:
    mon = JobMonitor("j", "local", 4, log_limit=50)
    events = [metric(i % 4, T0 + i, i // 4, loss=1.0 / (1 + i)) for i in range(8000)]
    events += [Event("log", i % 4, T0 + i, {"text": f"l{i}"}) for i in range(2000)]
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for ev in events:
                mon.feed(ev)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    while thread.is_alive():
        snap = mon.snapshot(now=T0)
        json.dumps(snap)
        mon.metrics_table()
        mon.folded_logs(limit=10)
    thread.join()
    assert errors == []
    assert mon.version == 10000
    assert len(mon.metrics_table()) == 8000
    assert mon.series_length("loss", 3) == 2000


def test_metrics_table_aligns_interleaved_ranks_and_metric_sets() -> None:
    mon = JobMonitor("j", "local", 3)
    mon.feed_many(
        [
            metric(2, T0 + 1, 1, loss=2.1),
            metric(0, T0 + 2, 1, loss=0.1),
            metric(1, T0 + 3, 1, loss=1.1, acc=0.11),
            metric(0, T0 + 4, 2, acc=0.02),
            metric(2, T0 + 5, 2, loss=2.2, acc=0.22),
            metric(0, T0 + 6, 3, loss=0.3, acc=0.03),
            Event("metric", 1, T0 + 7, {"step": 2, "values": {}}),
        ]
    )
    assert mon.metrics_table() == [
        {"rank": 2, "step": 1, "t": T0 + 1, "loss": 2.1},
        {"rank": 0, "step": 1, "t": T0 + 2, "loss": 0.1},
        {"rank": 1, "step": 1, "t": T0 + 3, "loss": 1.1, "acc": 0.11},
        {"rank": 0, "step": 2, "t": T0 + 4, "acc": 0.02},
        {"rank": 2, "step": 2, "t": T0 + 5, "loss": 2.2, "acc": 0.22},
        {"rank": 0, "step": 3, "t": T0 + 6, "loss": 0.3, "acc": 0.03},
        {"rank": 1, "step": 2, "t": T0 + 7},
    ]
    cols = mon.metrics_columns()
    np.testing.assert_array_equal(cols["acc"], [np.nan, np.nan, 0.11, 0.02, 0.22, 0.03, np.nan])
    assert cols["step"].tolist() == [1, 1, 1, 2, 2, 3, 2]
