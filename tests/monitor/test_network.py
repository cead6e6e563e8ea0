"""Failure sentences that name where ranks run: dead nodes, partitions, unresolved masters."""

from __future__ import annotations

import itertools

import pytest

from jupyter_disttrain.events import Event, rank_event
from jupyter_disttrain.monitor import Cause, JobMonitor
from jupyter_disttrain.monitor.network import (
    Unresolved,
    failed_sentence,
    partition_of,
    partition_sentence,
    place,
    timed_out_seconds,
)
from jupyter_disttrain.monitor.records import RankState

GLOO_TIMEOUT = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
    "20000ms for recv operation to complete"
)
NCCL_TIMEOUT = (
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds"
)
GAI = (
    "[W1128 10:03:02.095512018 socket.cpp:764] [c10d] The IPv6 network addresses of "
    "(hid-node-0-0.hid, 29500) cannot be retrieved (gai error: -3 - Temporary failure in name "
    "resolution)."
)


def rows(heard: dict[int, float | None], nproc: int = 1) -> dict[int, RankState]:
    """Ranks of ``nproc`` per node on pods ``job-N``, each last heard at ``heard[rank]``."""
    return {
        r: RankState(r, r // nproc, r % nproc, pod=f"job-{r // nproc}", last_heard=t, step=37)
        for r, t in heard.items()
    }


def timeout_cause(rank: int, t: float, reason: str = GLOO_TIMEOUT) -> Cause:
    return Cause(rank, "consequence", f"RuntimeError: {reason}", t, 0, ())


def test_a_place_names_the_node_and_the_pod_or_host() -> None:
    assert place(RankState(1, 1, 0, pod="job-worker-0", host="job-worker-0")) == (
        "node 1, pod job-worker-0"
    )
    assert place(RankState(3, 1, 1, host="laptop")) == "node 1 on laptop"
    assert place(RankState(3, 1, 1)) == "node 1"
    assert place(None) == ""


def test_a_killed_rank_is_named_with_its_node_and_pod() -> None:
    killed = Cause(1, "killed", "Error (exit code 137)", 5.0, 0, (0,))
    sentence = failed_sentence(killed, "", rows({0: 1.0, 1: 1.0}))
    assert sentence == (
        "rank 1 (node 1, pod job-1) was killed: Error (exit code 137); "
        "1 rank stopped as a consequence"
    )
    raised = Cause(0, "raised", "ValueError: bad batch", 5.0, 0, ())
    assert failed_sentence(raised, " (cell line 7)", {}) == (
        "rank 0 failed (cell line 7): ValueError: bad batch"
    )


def test_timeouts_are_read_from_gloo_and_nccl() -> None:
    assert timed_out_seconds(GLOO_TIMEOUT) == 20.0
    assert timed_out_seconds(NCCL_TIMEOUT) == 600.0
    assert timed_out_seconds("Connection closed by peer [10.244.0.3]:1234") is None


def test_a_timeout_while_another_node_was_silent_names_both_sides() -> None:
    sentence = partition_of(timeout_cause(0, 100.0), rows({0: 99.0, 1: 80.5}))
    assert sentence == (
        "rank 0 (node 0, pod job-0) and rank 1 (node 1, pod job-1) cannot reach each other: "
        "rank 0 waited 20 s in a collective after step 37 and heard nothing from node 1 all "
        "that time; the network between their nodes is cut, or node 1 hangs or stopped"
    )
    # the sides are named in node order whichever side's timeout arrived first
    other = partition_of(timeout_cause(1, 100.0), rows({0: 80.0, 1: 99.0}))
    assert other is not None and other.startswith("rank 0 (node 0, pod job-0) and rank 1 (")


def test_several_ranks_of_a_silent_node_are_named_together() -> None:
    heard: dict[int, float | None] = {0: 99.0, 1: 99.0, 2: 80.0, 3: None}
    sentence = partition_of(timeout_cause(0, 100.0, NCCL_TIMEOUT), rows(heard, nproc=2))
    assert sentence is None  # the NCCL wait was 600 s: node 1 spoke within it
    sentence = partition_of(timeout_cause(0, 700.0, NCCL_TIMEOUT), rows(heard, nproc=2))
    assert sentence is not None
    assert sentence.startswith("rank 0 (node 0, pod job-0) and ranks 2-3 (node 1, pod job-1)")


def test_no_partition_when_the_peers_spoke_or_the_cause_is_no_timeout() -> None:
    assert partition_of(timeout_cause(0, 100.0), rows({0: 99.0, 1: 95.0})) is None
    closed = Cause(0, "consequence", "RuntimeError: Connection closed by peer", 100.0, 0, ())
    assert partition_of(closed, rows({0: 99.0, 1: 10.0})) is None
    raised = Cause(0, "raised", f"RuntimeError: {GLOO_TIMEOUT}", 100.0, 0, ())
    assert partition_of(raised, rows({0: 99.0, 1: 10.0})) is None
    assert partition_of(None, rows({0: 99.0, 1: 10.0})) is None


def test_an_unresolved_master_is_read_until_a_rank_starts() -> None:
    names = Unresolved()
    names.feed("[W socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved.")
    assert names.sentence({}) is None
    names.feed(GAI)
    assert names.sentence({}) == (
        "the master address hid-node-0-0.hid does not resolve (Temporary failure in name "
        "resolution): no rank could reach hid-node-0-0.hid:29500 to start; its Service is "
        "missing or resolves to no pod, or MASTER_ADDR names the wrong host"
    )
    started = {0: RankState(0, 0, 0, pid=42)}
    assert names.sentence(started) is None


def test_the_monitor_names_the_pod_of_a_killed_rank_and_an_unresolved_master() -> None:
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    mon.feed(Event("log", None, 1.0, {"text": GAI, "source": "job-node-0-0-abcde"}))
    diagnosis = mon.diagnosis() or ""
    assert diagnosis.startswith("the master address hid-node-0-0.hid does not resolve"), diagnosis
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    for r in (0, 1):
        mon.feed(rank_event(r, "Running", host=f"job-{r}", node=r, pod=f"job-{r}", t=1.0))
    mon.feed(rank_event(1, "Failed", exit_code=137, reason="Error", node=1, pod="job-1", t=2.0))
    mon.feed(Event("job", None, 3.0, {"state": "Failed", "reason": "Failed", "message": ""}))
    diagnosis = mon.diagnosis() or ""
    assert diagnosis.startswith("rank 1 (node 1, pod job-1) was killed: Error (exit code 137)"), (
        diagnosis
    )


def test_a_partition_is_still_read_after_a_restart_while_the_node_stays_silent() -> None:
    before = timeout_cause(0, 100.0)
    killed = Cause(0, "killed", "Error (exit code 137)", 150.0, 1, ())
    silent = rows({0: 140.0, 1: 80.0})
    sentence = partition_sentence(killed, [before], silent)
    assert sentence is not None and sentence.startswith("rank 0 (node 0, pod job-0) and rank 1")
    assert partition_sentence(None, [before], silent) == sentence
    assert partition_sentence(None, [before], rows({0: 140.0, 1: 120.0})) is None  # it spoke
    assert partition_sentence(None, [], silent) is None


def test_a_worker_waiting_for_the_masters_name_reads_as_unresolved() -> None:
    names = Unresolved()
    names.feed(
        "pod job-worker-0 waits for the master address job-master-0: its init-pytorch could "
        "not resolve it 3 times"
    )
    assert names.sentence({}) == (
        "the master address job-master-0 does not resolve (pod job-worker-0's init-pytorch "
        "could not resolve it 3 times): no rank could reach job-master-0 to start; its Service "
        "is missing or resolves to no pod, or MASTER_ADDR names the wrong host"
    )


def killed_on_node_1(mon: JobMonitor) -> None:
    """Ranks on pods job-0 and job-1, both running; node 1's pod then dies (exit 137)."""
    for r in (0, 1):
        mon.feed(rank_event(r, "Running", host=f"job-{r}", node=r, pod=f"job-{r}", t=1.0))
        mon.feed(Event("hello", r, 1.5, {"local_rank": 0, "world_size": 2, "node_rank": r}))
    mon.feed(rank_event(1, "Failed", exit_code=137, reason="Error", node=1, pod="job-1", t=2.0))


def test_the_reason_of_a_failure_names_the_node_and_pod_as_the_diagnosis_does() -> None:
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    killed_on_node_1(mon)
    mon.feed(Event("job", None, 3.0, {"state": "Failed", "reason": "Failed", "message": ""}))
    assert mon.reason.startswith("rank 1 (node 1, pod job-1) was killed: Error (exit code 137)")
    assert mon.reason == mon.diagnosis()


def test_a_partition_is_the_reason_of_the_job_it_failed() -> None:
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    for r in (0, 1):
        mon.feed(rank_event(r, "Running", host=f"job-{r}", node=r, pod=f"job-{r}", t=1.0))
    mon.feed(Event("metric", 0, 90.0, {"step": 37, "values": {"loss": 1.0}}))
    mon.feed(Event("metric", 1, 80.0, {"step": 37, "values": {"loss": 1.0}}))
    error = {"type": "RuntimeError", "message": GLOO_TIMEOUT, "traceback": ""}
    mon.feed(Event("error", 0, 100.0, error))
    mon.feed(Event("job", None, 101.0, {"state": "Failed", "reason": "Failed", "message": ""}))
    assert mon.reason.startswith(
        "rank 0 (node 0, pod job-0) and rank 1 (node 1, pod job-1) cannot reach each other: "
    ), mon.reason
    assert mon.reason == mon.diagnosis()


#: A TrainJob's own report while its pods run (restarted in place or not).
TRAINJOB_RUNNING = {"state": "Running", "reason": "Running", "message": "TrainJob job is running"}


def restarting_until_node_1_says_hello(mon: JobMonitor) -> None:
    """The job reads Restarting, naming node 1's death, until its new rank says hello."""
    assert mon.state == "Restarting", mon.reason
    assert mon.reason.startswith(
        "restarting after rank 1 (node 1, pod job-1) was killed: Error (exit code 137)"
    ), mon.reason
    mon.feed(Event("hello", 1, 9.0, {"local_rank": 0, "world_size": 2, "node_rank": 1}))
    assert mon.state == "Running" and mon.reason == "TrainJob job is running"


def test_a_node_restarting_in_place_is_named_until_its_ranks_run_again() -> None:
    """A JobSet restarts a dead node's pod in place: the pod runs again before its ranks do."""
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    killed_on_node_1(mon)
    waiting = {"state": "Pending", "reason": "Created", "message": "the pods are starting"}
    mon.feed(Event("job", None, 2.1, waiting))
    mon.feed(Event("restart", None, 2.5, {"attempt": 1, "reason": "job-1 restarted"}))
    mon.feed(rank_event(1, "Running", host="job-1", node=1, pod="job-1", t=2.6))
    mon.feed(Event("job", None, 2.7, TRAINJOB_RUNNING))
    restarting_until_node_1_says_hello(mon)


def test_the_jobs_running_before_the_backends_restart_keeps_a_due_restart() -> None:
    """The job's own "Running" (its pods') can come before the backend's restart of a dead
    node: the restart its rank's death made due still holds until the new ranks say hello."""
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1, max_restarts=3)
    killed_on_node_1(mon)
    assert mon.state == "Restarting", mon.reason
    mon.feed(Event("job", None, 2.2, TRAINJOB_RUNNING))
    assert mon.state == "Restarting", mon.reason
    mon.feed(Event("restart", None, 2.5, {"attempt": 1, "reason": "job-1 restarted"}))
    mon.feed(Event("job", None, 2.7, TRAINJOB_RUNNING))
    restarting_until_node_1_says_hello(mon)


#: A TrainJob's own report while its pods start again, after it ran.
TRAINJOB_RESTARTING = {
    "state": "Restarting",
    "reason": "Restarting",
    "message": "the TrainJob's pods are starting again",
}
#: What follows node 1's death, each from its own stream: the TrainJob's reports (its
#: pods start again, then run), the backend's restart and node 1's pod running again.
AFTER_THE_DEATH = {
    "starting": lambda t: Event("job", None, t, TRAINJOB_RESTARTING),
    "running": lambda t: Event("job", None, t, TRAINJOB_RUNNING),
    "restart": lambda t: Event("restart", None, t, {"attempt": 1, "reason": "job-1 restarted"}),
    "pod": lambda t: rank_event(1, "Running", host="job-1", node=1, pod="job-1", t=t),
}


@pytest.mark.parametrize(
    "order",
    [
        order
        for order in itertools.permutations(AFTER_THE_DEATH)
        if order.index("starting") < order.index("running")
    ],
    ids="-".join,
)
def test_a_node_restarting_in_place_is_named_whatever_the_streams_order(
    order: tuple[str, ...],
) -> None:
    """The job and its pods are watched apart: the restart reads the same in any order."""
    mon = JobMonitor("job", "kubernetes", 2, nodes=2, nproc=1)
    killed_on_node_1(mon)
    for i, kind in enumerate(order):
        mon.feed(AFTER_THE_DEATH[kind](2.1 + i / 10))
    restarting_until_node_1_says_hello(mon)
