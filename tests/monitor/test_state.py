"""The monitor's one rule for states (monitor/state.py): the backend's own report of a wait
or a restart is not overridden by what ranks report until a rank runs again, and the cause
of a job that did not recover is chosen over every attempt."""

from __future__ import annotations

import numpy as np
import pytest

from jupyter_disttrain.events import Event, job_event, rank_event, restart_event
from jupyter_disttrain.monitor import JobMonitor
from tests.widgets.streams import hello, recorded

T = 1_700_000_000.0


def error(rank: int, t: float, message: str, kind: str = "RuntimeError") -> Event:
    trace = f"Traceback ...\n{kind}: {message}\n"
    return Event("error", rank, t, {"type": kind, "message": message, "traceback": trace})


def running(world: int = 2, backend: str = "kubernetes") -> JobMonitor:
    mon = JobMonitor("job", backend, world, nodes=world, nproc=1)
    mon.feed_many([job_event("Pending", "Created", t=T), job_event("Running", t=T + 1)])
    mon.feed_many([hello(r, T + 1.5, world=world) for r in range(world)])
    return mon


def test_a_wait_the_backend_reports_holds_until_a_rank_runs_again() -> None:
    """Kueue suspends a running job: its ranks end by SIGTERM while it waits in the queue;
    admitted again, a rank that raises fails the job."""
    mon = running()
    mon.feed_many(
        [
            job_event("Pending", "Queued", "waiting for Kueue admission in team-b", t=T + 2),
            rank_event(0, "Failed", exit_code=143, reason="Error", t=T + 2.1),
            rank_event(1, "Failed", exit_code=137, reason="Error", t=T + 2.2),
        ]
    )
    assert mon.state == "Pending" and mon.reason.startswith("waiting for Kueue")
    assert [r.state for r in mon.ranks()] == ["Stopped", "Stopped"]
    assert mon.cause() is None  # the backend ended them: nothing failed
    mon.feed_many([hello(r, T + 5, world=2) for r in range(2)])
    assert mon.state == "Running" and [r.state for r in mon.ranks()] == ["Running", "Running"]
    mon.feed(error(1, T + 6, "bad batch", "ValueError"))
    assert mon.state == "Failed" and mon.reason.startswith("rank 1: ValueError: bad batch")


def test_a_rank_that_fails_before_it_ran_leaves_a_pending_job_to_its_backend() -> None:
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    mon.feed_many(
        [
            job_event("Pending", "Created", t=T),
            rank_event(1, "Failed", exit_code=2, reason="Error", t=T + 1),
        ]
    )
    assert mon.state == "Pending" and mon.reason == "Created"
    assert mon.ranks()[1].state == "Failed"  # its own exit: the row says so
    mon.feed(job_event("Failed", "BackoffLimitExceeded", "job failed", t=T + 2))
    assert mon.state == "Failed" and mon.reason.startswith("rank 1: Error (exit code 2)")


def test_a_restart_holds_the_teardown_of_the_attempt_it_ends() -> None:
    """The ranks a restart ends (SIGTERM after the restart) are neither failures nor the job's
    state; the new attempt's ranks make it Running, then Succeeded, the failure history."""
    mon = running(backend="local")
    mon.feed(error(1, T + 2, "flaky loader"))
    assert mon.state == "Failed"  # the backend said Running: a rank's own failure shows at once
    mon.feed_many(
        [
            restart_event(1, "workers restarted by torchrun", t=T + 3),
            rank_event(0, "Failed", exit_code=-15, t=T + 3.1),
        ]
    )
    assert mon.state == "Restarting"
    assert mon.ranks()[0].state == "Stopped" and mon.reason.startswith("restarting after rank 1")
    mon.feed_many([hello(r, T + 4, world=2) for r in range(2)])
    assert mon.state == "Running"
    mon.feed_many([Event("done", r, T + 5, {}) for r in range(2)])
    assert mon.state == "Succeeded" and mon.cause() is None
    assert [c.rank for c in mon.recovered()] == [1]


def test_the_cause_of_a_job_that_did_not_recover_is_chosen_over_every_attempt() -> None:
    mon = running()
    mon.feed_many(
        [
            error(1, T + 2, "failing on rank 1"),
            rank_event(1, "Failed", exit_code=1, t=T + 2.1),
            restart_event(1, "pod restarted", t=T + 3),
            *[hello(r, T + 4, world=2) for r in range(2)],
            error(0, T + 5, "out of memory in the loader"),
            rank_event(0, "Failed", exit_code=1, t=T + 5.1),
            rank_event(1, "Failed", exit_code=143, t=T + 5.2),
            job_event("Failed", "BackoffLimitExceeded", "job failed", t=T + 6),
        ]
    )
    # both attempts raised: the last one's own failure ended the job
    assert (
        mon.reason == "rank 0: RuntimeError: out of memory in the loader; 1 rank stopped "
        "as a consequence"
    ), mon.reason
    assert mon.cause_error() is not None and mon.cause_error().rank == 0  # type: ignore[union-attr]


def test_a_last_attempt_of_signals_is_explained_by_the_rank_that_raised_before() -> None:
    mon = running()
    mon.feed_many(
        [
            error(1, T + 2, "failing on rank 1"),
            rank_event(1, "Failed", exit_code=1, t=T + 2.1),
            restart_event(1, "pod restarted", t=T + 3),
            *[hello(r, T + 4, world=2) for r in range(2)],
            rank_event(0, "Failed", exit_code=143, t=T + 5),
            rank_event(1, "Failed", exit_code=143, t=T + 5),
        ]
    )
    assert mon.state == "Failed"
    mon.feed(job_event("Failed", "BackoffLimitExceeded", "job failed", t=T + 6))
    cause = mon.cause()
    assert cause is not None and (cause.rank, cause.attempt) == (1, 0)
    assert mon.reason.startswith("rank 1: RuntimeError: failing on rank 1"), mon.reason
    error_event = mon.cause_error()
    assert error_event is not None and error_event.get("message") == "failing on rank 1"


STREAMS = ["rank1_raises", "restart_recovery", "hang", "oom_straggler", "stopped"]


def copied(events: list[Event]) -> list[Event]:
    """``events`` with every metric line arriving twice, as rank 0 relays others' lines."""
    out: list[Event] = []
    for event in events:
        out.append(event)
        if event.kind == "metric":
            out.append(Event("metric", event.rank, event.t, dict(event.fields)))
    return out


@pytest.mark.parametrize("metrics_only", [False, True])
@pytest.mark.parametrize("name", STREAMS)
def test_a_run_of_events_fed_at_once_reads_as_the_same_events_one_by_one(
    name: str, metrics_only: bool
) -> None:
    events = copied([e for e in recorded(name) if e.kind == "metric" or not metrics_only])
    # a rank stopped in the debugger meanwhile: the others' metrics then read as waiting
    middle = len(events) // 2
    events[middle:middle] = [Event("paused", 1, events[middle].t, {"file": "x.py", "line": 3})]
    one_by_one = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    for event in events:
        one_by_one.feed(event)
    in_runs = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    for start in range(0, len(events), 37):  # runs of mixed kinds, cut anywhere
        in_runs.feed_many(events[start : start + 37])

    now = events[-1].t + 5
    assert in_runs.snapshot(now) == one_by_one.snapshot(now)
    assert in_runs.version == one_by_one.version
    assert [r.reason for r in in_runs.ranks()] == [r.reason for r in one_by_one.ranks()]
    columns, expected = in_runs.metrics_columns(), one_by_one.metrics_columns()
    assert columns.keys() == expected.keys()
    for key, column in columns.items():
        np.testing.assert_array_equal(column, expected[key], err_msg=key)
