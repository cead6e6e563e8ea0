"""The root cause of a failure, chosen once by the monitor, on recorded event streams.

The streams in ``tests/data/events`` were recorded from real local jobs of
2 nodes x 2 processes on gloo (``python -m tests.monitor.record_streams``).
"""

from __future__ import annotations

import itertools
import re

import pytest

from jupyter_disttrain.events import Event
from jupyter_disttrain.monitor import JobMonitor, format_text
from jupyter_disttrain.monitor.cause import (
    LauncherExits,
    choose,
    classify_error,
    classify_exit,
    error_reason,
    user_traceback,
)
from tests.widgets.streams import recorded

GLOO_CLOSED = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:11950. This is typically caused by a remote worker crashing."
)


def fed(events: list[Event]) -> JobMonitor:
    mon = JobMonitor("job", "local", 4, nodes=2, nproc=2)
    mon.feed_many(events)
    return mon


def reordered(events: list[Event], kinds: set[str], order: tuple[int, ...]) -> list[Event]:
    """``events`` with those of ``kinds`` put in ``order`` where the first of them was."""
    picked = [e for e in events if e.kind in kinds]
    rest = [e for e in events if e.kind not in kinds]
    at = events.index(picked[0])
    before = [e for e in events[:at] if e.kind not in kinds]
    return before + [picked[i] for i in order] + rest[len(before) :]


def launcher_lines(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == "log" and e.rank is None]


# --------------------------------------------------------------------------- classes


def test_classes_of_errors_and_exits() -> None:
    assert classify_error("ValueError", "bad batch") == "raised"
    assert classify_error("RuntimeError", GLOO_CLOSED) == "consequence"
    assert (
        classify_error("RuntimeError", "Read error [127.0.0.1]:4: Connection reset by peer")
        == "consequence"
    )
    assert classify_error("DistBackendError", "NCCL watchdog timeout") == "consequence"
    assert classify_error("RuntimeError", "CUDA error: an illegal memory access") == "raised"
    assert classify_exit(3, "") == "exited"
    assert classify_exit(-15, "") == "killed"
    assert classify_exit(143, "") == "killed"
    assert classify_exit(137, "OOMKilled") == "exited"  # killed for memory: its own doing


def test_an_exits_words_are_its_reason_and_a_bare_status_keeps_its_type() -> None:
    assert error_reason("ValueError", "bad batch") == "ValueError: bad batch"
    assert error_reason("SystemExit", "prog: error: x is required") == "prog: error: x is required"
    assert error_reason("SystemExit", "2") == "SystemExit: 2"
    assert error_reason("KeyboardInterrupt", "") == "KeyboardInterrupt"


def test_launcher_summary_lines_give_exits() -> None:
    exits = LauncherExits()
    assert exits.feed("agent-0", "  rank      : 1 (local_rank: 1)", 5.0, 0) is None
    found = exits.feed("agent-0", "  exitcode  : 3 (pid: 31321) ", 5.0, 0)
    assert found is not None and (found.rank, found.reason, found.category) == (
        1,
        "exit code 3",
        "exited",
    )
    assert exits.feed("agent-1", "  rank      : 0 (local_rank: 0)", 5.0, 0) is None
    killed = exits.feed("agent-1", "  exitcode  : -15 (pid: 31319)  (SIGTERM)", 5.0, 0)
    assert killed is not None and (killed.rank, killed.category) == (0, "killed")
    assert killed.reason == "exit code -15 (SIGTERM)"
    # an exit line without its rank line says nothing
    assert exits.feed("agent-1", "  exitcode  : 1 (pid: 2) ", 5.0, 0) is None


# --------------------------------------------------------------------------- a rank raises


@pytest.mark.parametrize(
    ("stream", "rank", "reason"),
    [
        ("rank1_raises", 1, "ValueError: bad batch at step 5"),
        ("rank2_raises", 2, "ZeroDivisionError: integer division or modulo by zero"),
    ],
)
def test_the_raising_rank_is_the_cause_in_every_arrival_order(
    stream: str, rank: int, reason: str
) -> None:
    events = recorded(stream)
    errors = [e for e in events if e.kind == "error"]
    assert len(errors) == 4  # the raising rank and three lost connections
    line = f"rank {rank}: {reason}; 3 ranks stopped as a consequence"
    for order in itertools.permutations(range(4)):
        mon = fed(reordered(events, {"error"}, order))
        cause = mon.cause()
        assert cause is not None and (cause.rank, cause.category, cause.reason) == (
            rank,
            "raised",
            reason,
        ), order
        assert cause.consequences == tuple(r for r in range(4) if r != rank)
        assert mon.state == "Failed" and mon.reason == line
        assert mon.first_failure() == (rank, reason)
        states = [r.state for r in mon.ranks()]
        assert states == ["Stopped" if r != rank else "Failed" for r in range(4)], order
        diagnosis = mon.diagnosis()
        assert diagnosis is not None and diagnosis.startswith(f"rank {rank} failed (cell line 7)")
        assert "worker process exited" not in diagnosis and "gloo" not in diagnosis
        # while the first error to arrive was a lost connection, that one was the reading
        first = fed(reordered(events, {"error"}, order)[: events.index(errors[0]) + 1])
        assert first.cause() is not None


def test_cause_holds_when_the_launcher_summary_arrives_before_the_errors() -> None:
    events = recorded("rank1_raises")
    agent = launcher_lines(events)
    ahead = [e for e in events if e not in agent]
    at = next(i for i, e in enumerate(ahead) if e.kind == "error")
    mon = fed(ahead[:at] + agent + ahead[at:])
    assert mon.reason == "rank 1: ValueError: bad batch at step 5; 3 ranks stopped as a consequence"


def test_text_view_puts_the_cause_and_its_traceback_from_the_cell_first() -> None:
    text = format_text(fed(recorded("rank1_raises")).snapshot())
    lines = text.splitlines()
    assert lines[2] == "  rank 1: ValueError: bad batch at step 5; 3 ranks stopped as a consequence"
    at = lines.index("errors:")
    assert lines[at + 1] == "  rank 1: ValueError: bad batch at step 5"
    assert lines[at + 2].startswith(
        "  ranks 0,2 (consequence): RuntimeError: Connection closed by peer."
    )
    assert lines[at + 3].startswith(
        "  rank 3 (consequence): RuntimeError: Read error: Connection reset"
    )
    tb = lines[lines.index("traceback (rank 1):") + 1 :]
    assert tb[0].strip() == "Traceback (most recent call last):"
    assert tb[1].strip() == 'File "<distrain-cell>", line 7, in <module>'
    assert "worker.py" not in text and "first failure" not in text


def test_user_traceback_starts_at_the_cell() -> None:
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/x/runtime/worker.py", line 381, in run\n    value = run_cell()\n'
        '  File "<distrain-cell>", line 7, in <module>\n    f()\n'
        '  File "/home/u/mymodels.py", line 3, in f\n    1 // 0\n'
        "ZeroDivisionError: integer division or modulo by zero"
    )
    assert user_traceback(tb).splitlines() == [
        "Traceback (most recent call last):",
        '  File "<distrain-cell>", line 7, in <module>',
        "    f()",
        '  File "/home/u/mymodels.py", line 3, in f',
        "    1 // 0",
        "ZeroDivisionError: integer division or modulo by zero",
    ]
    assert user_traceback("no frames") == "no frames"


# --------------------------------------------------------------------------- launcher only


def test_a_rank_that_exits_without_an_exception_is_named_from_the_launcher() -> None:
    events = recorded("rank1_exits")
    assert not [e for e in events if e.kind == "error" and e.rank == 1]
    for order in itertools.permutations(range(3)):
        mon = fed(reordered(events, {"error"}, order))
        cause = mon.cause()
        assert cause is not None and (cause.rank, cause.category) == (1, "exited"), order
        assert mon.reason == "rank 1: exit code 3; 3 ranks stopped as a consequence"
        assert [r.state for r in mon.ranks()] == ["Stopped", "Failed", "Stopped", "Stopped"]
        snap = mon.snapshot()
        assert snap["first_failure"] is not None and snap["first_failure"]["rank"] == 1
        text = format_text(snap)
        # the lost connections are consequences, and their tracebacks are not the cause's
        assert "traceback (rank" not in text
        assert "A worker process exited" not in text and "Root Cause" not in text


def test_the_launcher_report_alone_never_fails_a_running_job() -> None:
    events = recorded("rank1_exits")
    agent = launcher_lines(events)
    start = [e for e in events if e.kind in ("hello", "job")][:6]
    mon = fed(start + agent)
    assert mon.state == "Running" and mon.cause() is None
    assert mon.reason == "all agents rendezvoused"  # what the backend said, not an exit


# --------------------------------------------------------------------------- stop


def test_a_stopped_job_has_no_error_and_no_failed_rank() -> None:
    mon = fed(recorded("stopped"))
    assert mon.state == "Stopped" and mon.reason == "stopped by user"
    assert mon.diagnosis() is None and mon.cause() is None
    assert {r.state for r in mon.ranks()} == {"Stopped"}
    text = format_text(mon.snapshot())
    assert "errors:" not in text and "nrecognised" not in text


def test_lost_connections_the_stop_caused_are_not_failures() -> None:
    events = recorded("stopped")
    final = events[-1]
    assert final.kind == "job" and final.get("state") == "Stopped"
    lost = [
        Event("error", r, final.t - 0.1, {"type": "RuntimeError", "message": GLOO_CLOSED})
        for r in (2, 3)
    ] + [Event("rank", 0, final.t - 0.05, {"state": "Failed", "exit_code": -15})]
    mon = fed(events[:-1] + lost)
    assert mon.display_state == "Failed"  # until the backend says it was a stop
    mon.feed(final)
    assert mon.display_state == "Stopped" and mon.reason == "stopped by user"
    assert {r.state for r in mon.ranks()} == {"Stopped"}
    snap = mon.snapshot()
    assert snap["errors"] == [] and snap["cause"] is None and snap["first_failure"] is None
    assert snap["diagnosis"] is None


# --------------------------------------------------------------------------- restart


def test_a_recovered_failure_is_history_not_the_current_problem() -> None:
    events = recorded("restart_success")
    restart = next(i for i, e in enumerate(events) if e.kind == "restart")
    during = fed(events[: restart + 1])
    assert during.state == "Restarting"
    assert during.reason.startswith("restarting after rank 1: RuntimeError: flaky loader")
    mon = fed(events)
    assert mon.state == "Succeeded" and mon.reason == "4 ranks done"
    assert mon.cause() is None and mon.diagnosis() is None
    snap = mon.snapshot()
    assert snap["recovered"] == "recovered from 1 failure (rank 1: RuntimeError: flaky loader)"
    assert snap["errors"] == [] and snap["first_failure"] is None
    assert {r["state"] for r in snap["ranks"]} == {"Succeeded"}
    text = format_text(snap)
    assert "worker process exited" not in text.lower() and "errors:" not in text
    assert "  recovered from 1 failure (rank 1: RuntimeError: flaky loader)" in text


# --------------------------------------------------------------------------- nccl -> gloo


def test_after_a_fallback_to_gloo_nothing_speaks_of_nccl() -> None:
    mon = fed(recorded("nccl_fallback"))
    assert mon.state == "Succeeded" and mon.dist_backend == "gloo"
    assert mon.diagnosis() is None
    assert "NCCL" not in format_text(mon.snapshot())


# --------------------------------------------------------------------------- hang


def test_a_hang_is_its_own_state_until_the_ranks_move_again() -> None:
    events = recorded("hang")
    last = max(i for i, e in enumerate(events) if e.kind == "stacks")
    mon = fed(events[: last + 1])
    later = events[last].t + 20
    snap = mon.snapshot(now=later)
    assert mon.state == "Running" and snap["state"] == "Hung" and mon.display_state == "Hung"
    assert snap["diagnosis"] is not None
    assert re.search(r"rank 1 is in time\.sleep \(cell line 7\)", snap["diagnosis"])
    assert format_text(snap).splitlines()[0].split(" | ")[0].endswith("Hung")
    assert snap["stalled"] and snap["steps_per_s"] is None
    # the rows: rank 1 holds the others up and says where; the others say where they wait
    rows = {r["rank"]: (r["state"], r["reason"]) for r in snap["ranks"]}
    assert rows[1] == ("Hung", "is in time.sleep (cell line 7)"), rows
    assert all(
        state == "Running" and reason.startswith("waits in ")
        for rank, (state, reason) in rows.items()
        if rank != 1
    ), rows
    mon.feed(Event("metric", 1, later, {"step": 6, "values": {"loss": 0.1}}))
    moved = mon.snapshot(now=later + 1)
    assert moved["state"] == "Running" and mon.display_state == "Running"
    assert {r["state"] for r in moved["ranks"]} == {"Running"}  # no rank marked once it moves
    stopped = fed(events).snapshot()
    assert stopped["state"] == "Stopped"
    # stopped while hung: its rate stays "stalled", not the rate from before the hang
    assert stopped["stalled"] and stopped["steps_per_s"] is None, stopped["steps_per_s"]


def test_a_rank_silent_longer_than_its_interval_reads_as_stalled() -> None:
    mon = JobMonitor("job", "local", 2, nodes=1, nproc=2)
    t0 = 1_800_000_000.0
    for rank in (0, 1):
        mon.feed(Event("hello", rank, t0, {"backend": "gloo"}))
    for step in range(20):
        for rank in (0, 1):
            mon.feed(Event("metric", rank, t0 + 1 + step * 0.5, {"step": step, "values": {}}))
    last = t0 + 1 + 19 * 0.5
    moving = mon.snapshot(now=last + 0.6)
    assert not moving["stalled"] and moving["steps_per_s"] == pytest.approx(2.0)
    assert [r["step_rate"] for r in moving["ranks"]] == [pytest.approx(2.0)] * 2
    quiet = mon.snapshot(now=last + 3)
    assert quiet["stalled"] and quiet["steps_per_s"] is None
    assert [(r["stalled"], r["step_rate"]) for r in quiet["ranks"]] == [(True, None)] * 2
    lines = format_text(quiet).splitlines()
    assert lines[0].endswith("| step 19 | stalled")
    mon.feed(Event("metric", 0, last + 3, {"step": 20, "values": {}}))
    again = mon.snapshot(now=last + 3.1)
    assert not again["stalled"] and [r["stalled"] for r in again["ranks"]] == [False, True]
    mon.feed(Event("job", None, last + 4, {"state": "Succeeded"}))
    assert not mon.snapshot(now=last + 60)["stalled"]  # a finished job keeps its rate


# --------------------------------------------------------------------------- sessions


def session_cell(errors: dict[int, str], *, ends_first: bool = False) -> JobMonitor:
    """A session cell's monitor as sessions.py feeds it: hellos, the cell's lines, its end.

    ``ends_first``: the ranks' end lines arrive before their errors (sessions.py feeds the
    errors from rank 0's reply, which may come after the end lines or before them).
    """
    t0 = 1_800_000_000.0
    mon = JobMonitor("sess", "local", 4, nodes=2, nproc=2)
    mon.feed_many([Event("hello", r, t0, {"backend": "gloo"}) for r in range(4)])
    mon.feed(Event("job", None, t0, {"state": "Running", "reason": "Started"}))
    for rank in range(4):
        mon.feed(Event("cell", rank, t0 + 1, {"id": 3, "phase": "start"}))
    ends = []
    for rank in range(4):
        status = "error" if rank in errors else "ok"
        ends.append(Event("cell", rank, t0 + 3, {"id": 3, "phase": "end", "status": status}))
    raised = [
        Event("error", rank, t0 + 2, {"type": "ValueError", "message": message})
        for rank, message in errors.items()
    ]
    mon.feed_many(ends + raised if ends_first else raised + ends)
    state = "Failed" if errors else "Succeeded"
    mon.feed(Event("job", None, t0 + 4, {"state": state, "message": "rank 0 raised"}))
    return mon


def test_a_session_cells_ranks_read_ready_after_it() -> None:
    mon = session_cell({})
    assert mon.state == "Succeeded" and [r.state for r in mon.ranks()] == ["Ready"] * 4


@pytest.mark.parametrize("ends_first", [False, True])
def test_a_failing_session_cell_names_its_rank_and_leaves_the_others_ready(
    ends_first: bool,
) -> None:
    mon = session_cell({2: "bad input"}, ends_first=ends_first)
    assert mon.state == "Failed" and mon.display_state == "Raised"  # the cell raised
    # rank 2 raised and lives on (not Failed: nothing died), the others are ready
    assert [r.state for r in mon.ranks()] == ["Ready", "Ready", "Raised", "Ready"]
    assert mon.ranks()[2].reason == "ValueError: bad input"
    assert mon.reason == "rank 2: ValueError: bad input"  # no rank stopped: the group lives on
    assert mon.diagnosis() == "the cell raised on rank 2; the session is ready for the next cell"


@pytest.mark.parametrize("ends_first", [False, True])
def test_a_session_cell_that_raises_the_same_on_every_rank_says_it_once(
    ends_first: bool,
) -> None:
    mon = session_cell(dict.fromkeys(range(4), "bad input"), ends_first=ends_first)
    assert mon.reason == "all 4 ranks: ValueError: bad input"  # no rank stopped as a consequence
    assert [r.state for r in mon.ranks()] == ["Raised"] * 4
    snap = mon.snapshot()
    assert snap["state"] == "Raised" and snap["why"] == mon.reason
    said = "the cell raised on all 4 ranks; the session is ready for the next cell"
    assert snap["diagnosis"] == mon.diagnosis() == said
    some = session_cell({1: "bad input", 2: "bad input"}, ends_first=ends_first)
    assert some.reason == "ranks 1-2: ValueError: bad input"  # 0 and 3 are ready
    ready = "the cell raised on ranks 1-2; the session is ready for the next cell"
    assert some.diagnosis() == ready


def test_a_session_cell_whose_rank_died_reads_failed() -> None:
    """Rank 3 never ended its cell (its process died): the cell's job is Failed, not Raised."""
    t0 = 1_800_000_000.0
    mon = JobMonitor("sess", "local", 4, nodes=2, nproc=2)
    mon.feed_many([Event("hello", r, t0, {"backend": "gloo"}) for r in range(4)])
    mon.feed(Event("job", None, t0, {"state": "Running", "reason": "Started"}))
    mon.feed(Event("error", 1, t0 + 2, {"type": "ValueError", "message": "bad input"}))
    for rank in range(3):
        status = "error" if rank == 1 else "ok"
        mon.feed(Event("cell", rank, t0 + 3, {"id": 3, "phase": "end", "status": status}))
    mon.feed(Event("job", None, t0 + 4, {"state": "Failed", "message": "a rank died"}))
    assert mon.display_state == "Failed" and mon.snapshot()["state"] == "Failed"
    assert [r.state for r in mon.ranks()] == ["Ready", "Raised", "Ready", "Stopped"]
    assert "session is ready" not in (mon.diagnosis() or "")


def test_a_sessions_ranks_read_raised_after_a_raising_cell_and_ready_after_the_next() -> None:
    """The session's own monitor (the sidebar's detail) sees only the cells' end lines."""
    t0 = 1_800_000_000.0
    mon = JobMonitor("sess", "local", 4, nodes=2, nproc=2)
    mon.feed(Event("job", None, t0, {"state": "Running", "reason": "Started"}))
    mon.feed_many([Event("hello", r, t0, {"backend": "gloo"}) for r in range(4)])
    for cell, status, shown in ((1, "error", "Raised"), (2, "ok", "Ready")):
        for rank in range(4):
            end = {"id": cell, "phase": "end", "status": status}
            mon.feed(Event("cell", rank, t0 + cell, end))
        assert [r.state for r in mon.ranks()] == [shown] * 4, cell
        assert mon.state == mon.display_state == "Running"  # the session lives throughout


def test_every_rank_exiting_with_the_same_error_is_said_once() -> None:
    t0 = 1_800_000_000.0
    mon = JobMonitor("argv", "local", 4, nodes=2, nproc=2)
    mon.feed(Event("job", None, t0, {"state": "Running", "reason": "Started"}))
    mon.feed_many([Event("hello", r, t0 + 1, {"backend": "gloo"}) for r in range(4)])
    for rank in (3, 1, 0, 2):  # arrival order does not matter
        mon.feed(Event("error", rank, t0 + 2 + rank / 10, {"type": "SystemExit", "message": "2"}))
    mon.feed(Event("job", None, t0 + 4, {"state": "Failed", "reason": "WorkerFailed"}))
    assert mon.reason == "all 4 ranks: SystemExit: 2"
    cause = mon.snapshot()["cause"]
    assert cause is not None and cause["rank"] == 0 and cause["consequences"] == []


def test_restarts_that_do_not_recover_keep_the_raising_rank_as_the_cause() -> None:
    """A Kubernetes pod that restarts until its Job gives up: the last attempt shows only
    the SIGTERMs that ended the pods; the rank that raised before is still the cause."""
    from jupyter_disttrain.events import job_event, rank_event, restart_event

    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    error = {
        "type": "RuntimeError",
        "module": "builtins",
        "message": "failing on rank 1",
        "traceback": "Traceback ...\nRuntimeError: failing on rank 1\n",
    }
    mon.feed_many(
        [
            job_event("Running", t=1.0),
            Event("error", 1, 2.0, dict(error)),
            rank_event(1, "Failed", exit_code=1, t=2.1),
            restart_event(1, "pod restarted", t=3.0),
            rank_event(0, "Failed", exit_code=143, t=5.0),
            rank_event(1, "Failed", exit_code=143, t=5.0),
            job_event("Failed", "BackoffLimitExceeded", "job failed", t=6.0),
        ]
    )
    assert mon.reason.startswith("rank 1: RuntimeError: failing on rank 1"), mon.reason


def test_ranks_ended_by_a_preemption_while_the_job_waits_in_its_queue_fail_nothing() -> None:
    from jupyter_disttrain.events import job_event, rank_event

    mon = JobMonitor("job", "kubernetes", 1, nodes=1, nproc=1)
    mon.feed_many(
        [
            job_event("Running", t=1.0),
            job_event("Pending", "Queued", "waiting for Kueue admission in team-b", t=2.0),
            rank_event(0, "Failed", exit_code=143, reason="Error", t=2.1),
        ]
    )
    assert mon.state == "Pending" and mon.reason.startswith("waiting for Kueue"), mon.reason


# --------------------------------------------------------------------------- a killed rank


def killed_and_recovered(exit_after_restart: bool) -> JobMonitor:
    """Rank 2 SIGKILLed, rank 1 loses its peer, torchrun restarts the workers (02-checkpoints)."""
    from jupyter_disttrain.events import job_event, restart_event

    hellos = [
        Event("hello", r, 1.0 + r / 10, {"pid": 100 + r, "backend": "gloo"}) for r in range(4)
    ]
    exit_line = Event(
        "log",
        None,
        3.0,
        {
            "source": "agent-1",
            "text": "[E1128 api.py:1003] failed (exitcode: -9) local_rank: 0 (pid: 102) of "
            "binary: /usr/bin/python3",
        },
    )
    lost = Event(
        "error",
        1,
        2.9,
        {"type": "RuntimeError", "message": GLOO_CLOSED.replace("Connection closed", "Read error")},
    )
    again = [Event("hello", r, 5.0, {"pid": 200 + r, "restart": 1}) for r in range(4)]
    again.append(Event("loaded", 0, 5.5, {"step": 30, "uri": "/ckpt/step-30.pt"}))
    restart = restart_event(1, "workers restarted by torchrun", t=4.0)
    order = [restart, exit_line] if exit_after_restart else [exit_line, restart]
    events = [job_event("Running", t=1.0), *hellos, lost, *order, *again]
    events += [Event("done", r, 9.0, {}) for r in range(4)]
    return fed(events)


@pytest.mark.parametrize("exit_after_restart", [False, True])
def test_the_killed_rank_not_the_one_that_lost_its_peer_is_the_recovered_cause(
    exit_after_restart: bool,
) -> None:
    mon = killed_and_recovered(exit_after_restart)
    assert mon.state == "Succeeded", mon.reason
    snap = mon.snapshot()
    assert snap["recovered"] == (
        "recovered from 1 failure (rank 2 was killed (SIGKILL)); resumed from checkpoint 30"
    )


def test_a_worker_exit_torchrun_logs_before_a_restart_names_the_rank_by_pid() -> None:
    exits = LauncherExits()
    line = "failed (exitcode: -9) local_rank: 0 (pid: 4242) of binary: /usr/bin/python3"
    killed = exits.feed("agent-1", line, 3.0, 1, {4242: (2, 0)})
    assert killed is not None
    assert (killed.rank, killed.attempt, killed.category) == (2, 0, "killed")
    assert killed.reason == "exit code -9 (SIGKILL)"
    assert exits.feed("agent-1", line, 3.0, 1, {}) is None  # an unknown pid names no rank


def test_a_worker_its_agent_stopped_is_a_consequence_of_the_one_that_died() -> None:
    """Rank 3 is SIGKILLed; its agent SIGTERMs rank 2 and lists both, lowest rank first,
    at one time: rank 3 is the cause (as seen with torch 2.13, a 2x2 job)."""
    pids = {29989: (2, 0), 29994: (3, 0)}
    lines = [
        "[...] Sending process 29989 closing signal SIGTERM",
        "[...] failed (exitcode: -9) local_rank: 1 (pid: 29994) of binary: /usr/bin/python3",
        "  rank      : 2 (local_rank: 0)",
        "  exitcode  : -15 (pid: 29989)  (SIGTERM)",
        "  rank      : 3 (local_rank: 1)",
        "  exitcode  : -9 (pid: 29994)  (SIGKILL)",
    ]
    exits = LauncherExits()
    found = [exits.feed("agent-1", line, 5.0, 0, pids) for line in lines]
    said = [(f.rank, f.category, f.reason) for f in found if f is not None]
    assert said == [
        (3, "killed", "exit code -9 (SIGKILL)"),
        (2, "consequence", "exit code -15 (SIGTERM)"),
        (3, "killed", "exit code -9 (SIGKILL)"),
    ]
    ended = {0: "Stopped", 1: "Stopped", 2: "Failed", 3: "Failed"}
    cause = choose([], 0, ended, [f for f in found if f is not None])
    assert cause is not None and cause.said() == "rank 3 was killed (SIGKILL)"
    assert cause.consequences == (0, 1, 2)
