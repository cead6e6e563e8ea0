"""FailureBook alone: the cause among failures, logged exits, restarts, stops and errors."""

from __future__ import annotations

from jupyter_disttrain.events import Event
from jupyter_disttrain.monitor.failures import FailureBook
from jupyter_disttrain.monitor.records import ErrorInfo, Failure

WORKER_EXIT = "failed (exitcode: -9) local_rank: 0 (pid: 4242) of binary: /usr/bin/python3"
SUMMARY = ["  rank      : 1 (local_rank: 1)", "  exitcode  : 3 (pid: 77)"]


def error(rank: int, t: float, message: str, attempt: int = 0) -> tuple[ErrorInfo, Event]:
    fields = {"type": "ValueError", "message": message, "traceback": ""}
    info = ErrorInfo(rank, t, "ValueError", message, "", attempt)
    return info, Event("error", rank, t, fields)


def test_the_raising_rank_is_the_cause_and_the_others_its_consequences() -> None:
    book = FailureBook()
    book.fail(Failure(2.0, 1, "exit code -15", 0, "killed"))
    book.fail(Failure(3.0, 0, "ValueError: bad", 0, "raised"))
    states = {0: "Failed", 1: "Failed", 2: "Succeeded"}
    cause = book.cause(states, 0, failed=True)
    assert cause is not None and (cause.rank, cause.category) == (0, "raised")
    assert cause.consequences == (1,)
    assert book.worst(0, failed=True) == {0: 0, 1: 2}
    assert [f.rank for f in book.failures()] == [1, 0]  # arrival order


def test_a_summary_exit_counts_only_once_the_job_failed() -> None:
    book = FailureBook()
    assert not book.agent_line("agent-0", SUMMARY[0], 5.0, 0)
    assert book.agent_line("agent-0", SUMMARY[1], 5.0, 0)  # an exit of this attempt
    assert book.cause({0: "Running", 1: "Failed"}, 0, failed=False) is None
    cause = book.cause({0: "Running", 1: "Failed"}, 0, failed=True)
    assert cause is not None and (cause.rank, cause.reason) == (1, "exit code 3")


def test_a_restart_recovers_from_its_cause_and_a_late_exit_names_it_again() -> None:
    book = FailureBook()
    book.pid(4242, 2, 0)
    book.fail(Failure(2.0, 0, "RuntimeError: peer went away", 0, "consequence"))
    book.restart({0: "Failed", 1: "Running", 2: "Running"}, 0, failed=False)
    (before,) = book.recovered()
    assert (before.rank, before.category) == (0, "consequence")
    # torchrun's line about attempt 0's worker arrives once attempt 1 began
    assert not book.agent_line("agent-1", WORKER_EXIT, 3.0, 1)
    (after,) = book.recovered()
    assert (after.rank, after.category, after.reason) == (2, "killed", "exit code -9 (SIGKILL)")
    assert book.cause({0: "Running"}, 1, failed=False) is None  # the new attempt has none


def test_a_stop_forgets_what_it_caused_but_not_what_a_rank_did_itself() -> None:
    book = FailureBook()
    book.fail(Failure(1.0, 0, "ValueError: bad", 0, "raised"))
    book.fail(Failure(2.0, 1, "exit code -15", 0, "killed"))
    book.fail(Failure(0.5, 3, "exit code 1", -1, "killed"))  # an earlier attempt's: kept
    assert book.stopped(0) == {0}
    assert [f.rank for f in book.failures()] == [0, 3]


def test_errors_are_kept_in_order_and_the_causes_event_is_its_first() -> None:
    book = FailureBook()
    late = error(1, 9.0, "second", attempt=0)
    early = error(1, 4.0, "first", attempt=0)
    stopped = error(0, 5.0, "broken pipe", attempt=1)
    own = error(1, 6.0, "bad batch", attempt=1)
    for info, event in (late, early, stopped, own):
        book.error(info, event)
    assert [e.message for e in book.errors()] == ["second", "first", "broken pipe", "bad batch"]
    assert [e.t for e in book.error_events()] == [4.0, 5.0, 6.0, 9.0]
    found = book.error_event(1, 0)
    assert found is not None and found.get("message") == "second"  # the first to arrive
    assert found is not late[1] and book.error_event(2, 0) is None  # a copy; none for rank 2
    assert [e.message for e in book.current_errors(1, stopped=False)] == [
        "broken pipe",
        "bad batch",
    ]
    assert [e.message for e in book.current_errors(1, stopped=True)] == ["bad batch"]
