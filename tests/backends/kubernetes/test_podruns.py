"""What a pod's successive objects tell: a run's end seen or missed, its restart, its ranks."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.backends.kubernetes.podruns import PodRuns, Seen, seen
from jupyter_disttrain.backends.kubernetes.status import pod_facts, previous_run

KILLED = {"exitCode": 137, "reason": "Error", "containerID": "emulator://run-0"}


def pod(state: dict[str, Any], restarts: int, last: dict[str, Any] | None = None) -> dict[str, Any]:
    status = {"name": "node", "state": state, "restartCount": restarts, "lastState": {}}
    if last is not None:
        status["lastState"] = {"terminated": last}
    phase = "Failed" if "terminated" in state else "Running"
    return {
        "metadata": {"name": "job-node-0-1"},
        "status": {"phase": phase, "containerStatuses": [status]},
    }


def told(
    runs: PodRuns, obj: dict[str, Any], previous: Seen | None
) -> tuple[list[tuple[Any, ...]], bool, Seen]:
    facts = pod_facts(obj, "node", 1)
    events, failed = runs.told(obj, facts, previous)
    shown = [(e.kind, e.rank, e.fields.get("state"), e.fields.get("exit_code")) for e in events]
    return shown, failed, seen(facts)


def test_a_run_seen_to_end_is_told_once_then_its_restart_and_the_next_run() -> None:
    runs = PodRuns("node", 1)
    _, _, seen = told(runs, pod({"running": {}}, 0), None)
    events, failed, seen = told(runs, pod({"terminated": KILLED}, 0), seen)
    assert (events, failed) == ([("rank", 1, "Failed", 137)], True)
    events, failed, _ = told(runs, pod({"running": {}}, 1, KILLED), seen)
    assert (events, failed) == (
        [("restart", None, None, None), ("rank", 1, "Running", None)],
        False,
    )


def test_a_run_that_ended_between_two_reads_is_told_from_its_last_state() -> None:
    """The kubelet wrote the pod once the next run had started: only lastState says the kill."""
    runs = PodRuns("node", 2)
    _, _, seen = told(runs, pod({"running": {}}, 0), None)
    events, failed, _ = told(runs, pod({"running": {}}, 1, KILLED), seen)
    assert failed
    assert events == [
        ("rank", 2, "Failed", 137),
        ("rank", 3, "Failed", 137),
        ("restart", None, None, None),
        ("rank", 2, "Running", None),
        ("rank", 3, "Running", None),
    ]


def test_a_pod_first_seen_after_a_restart_tells_no_old_end() -> None:
    """A watch that starts late sees the pod's history only as lastState: no failure now."""
    runs = PodRuns("node", 1)
    events, failed, _ = told(runs, pod({"running": {}}, 1, KILLED), None)
    assert (events, failed) == ([("rank", 1, "Running", None)], False)
    events, _, _ = told(runs, pod({"running": {}}, 1, KILLED), ("Pending", 1, ""))
    assert events == [("rank", 1, "Running", None)]  # that end is known: not told again


def test_the_previous_run_reads_its_exit_and_a_run_without_a_container_id_has_an_identity() -> None:
    ended = {
        "exitCode": 0,
        "startedAt": "2026-12-04T10:00:00Z",
        "finishedAt": "2026-12-04T10:01:00Z",
    }
    obj = pod({"running": {}}, 1, ended)
    before = previous_run(obj, "node", pod_facts(obj, "node", 1))
    assert before is not None
    assert (before.state, before.exit_code, before.restarts) == ("Succeeded", 0, 0)
    assert before.ended == "2026-12-04T10:00:00Z/2026-12-04T10:01:00Z"
    fresh = pod({"running": {}}, 0)
    assert previous_run(fresh, "node", pod_facts(fresh, "node", 1)) is None
