"""The attempt a local job's hellos open: after a failure, and after torchrun's membership
change (a node whose workers looked healthy starts them again under the same count)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.backends.local.attempts import Attempts
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.runtime.jobstore import round_key
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import Collector, job_logs
from tests.conftest import submit_now


def opened(attempts: Attempts, hellos: list[tuple[int, int]]) -> list[int | None]:
    """What each (rank, restart count) hello opened, in the order read."""
    return [attempts.hello(rank, restart) for rank, restart in hellos]


def test_a_failure_restart_opens_one_attempt_whichever_node_is_read_first() -> None:
    attempts = Attempts()
    assert opened(attempts, [(r, 0) for r in range(4)]) == [None] * 4
    assert opened(attempts, [(2, 1), (3, 1), (0, 1), (1, 1)]) == [1, None, None, None]
    assert attempts.current == 1
    assert opened(attempts, [(1, 2), (0, 2), (3, 2), (2, 2)]) == [2, None, None, None]


def test_a_membership_restart_under_the_old_count_is_the_next_attempt() -> None:
    """Node 0 (ranks 0, 1) starts its workers again under count 0, as node 1's agent comes
    back after rank 2 was killed; node 1's hellos under count 1 are the same attempt."""
    attempts = Attempts()
    opened(attempts, [(r, 0) for r in range(4)])
    assert opened(attempts, [(0, 0), (1, 0), (2, 1), (3, 1)]) == [1, None, None, None]
    # the next failure: node 0 now counts its first restart, node 1 its second
    assert opened(attempts, [(0, 1), (1, 1), (2, 2), (3, 2)]) == [2, None, None, None]
    assert attempts.current == 2


def test_hellos_of_other_sources_and_a_count_that_jumps() -> None:
    attempts = Attempts()
    assert opened(attempts, [(0, 0), (1, 0)]) == [None, None]
    assert attempts.hello(None, 0) is None  # no rank: it cannot say hello twice
    assert attempts.hello(0, 3) == 3  # a count read after hellos that were missed
    assert attempts.hello(1, 2) is None


def local_events(order: list[tuple[int, int]]) -> list[ev.Event]:
    """The events the local backend sends of a 2x2 job whose rank 2 is killed, then the
    hellos of the next attempt in ``order``."""
    attempts = Attempts()
    events = [ev.job_event("Running", t=1000.0)]

    def hello(rank: int, restart: int, t: float) -> None:
        said = ev.Event("hello", rank, t, {"pid": int(t * 10) + rank, "restart": restart})
        events.extend(e for e in (attempts.restart(said), said) if e is not None)

    for rank in range(4):
        hello(rank, 0, 1001.0)
    events.append(ev.rank_event(2, "Failed", exit_code=-9, reason="SIGKILL", t=1002.0))
    for i, (rank, restart) in enumerate(order):
        hello(rank, restart, 1003.0 + i)
    return events


def test_the_rank_table_counts_one_restart_for_each_rank_in_either_order() -> None:
    """What the monitor reads of the local backend's events: every rank restarted once, as
    the header's "1 restart" says, whether node 0's hellos come before node 1's or after."""
    for order in ([(0, 0), (1, 0), (2, 1), (3, 1)], [(2, 1), (3, 1), (0, 0), (1, 0)]):
        monitor = JobMonitor("membership", "local", 4, nodes=2, nproc=2, max_restarts=1)
        monitor.feed_many(local_events(order))
        snap = monitor.snapshot()
        assert snap["restarts"] == 1, (order, snap["restarts"])
        assert [r["restarts"] for r in snap["ranks"]] == [1, 1, 1, 1], order


MEMBERSHIP = textwrap.dedent(
    """
    import os, pathlib, signal, time, torch.distributed as dist
    from jupyter_disttrain.runtime.jobstore import round_key
    first = not pathlib.Path(MARKER).exists()  # read before any rank can write it
    dist.barrier()
    if first:  # the first attempt: rank 2 dies while the others are idle
        if dist.get_rank() == 2:
            pathlib.Path(MARKER).write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # no collective: node 0's workers never see rank 2 die
    keys = [None] * dist.get_world_size()
    dist.all_gather_object(keys, round_key("test", "k"))
    keys
    """
)


@pytest.mark.slow
def test_a_real_membership_restart_reads_as_one_restart_with_one_round(tmp_path: Path) -> None:
    """torchrun, 2x2, rank 2 killed while every other rank sleeps: node 1's agent restarts
    its workers (count 1) and node 0's restarts its healthy ones as a membership change
    (count 0). The job reads one restart for every rank, and its ranks share one round."""
    spec = JobSpec("membership", nodes=2, nproc=2, max_restarts=1, timeout=120)
    sink = Collector()
    payload = build_payload(MEMBERSHIP, {"MARKER": str(tmp_path / "killed")}, job=spec.name)
    run = submit_now(LocalBackend(), spec, payload, sink)
    assert run.join(120), f"job did not finish\n{job_logs(run)}"
    assert sink.final().get("state") == "Succeeded", job_logs(run)
    again = {e.rank: e.get("restart") for e in sink.kinds("hello")[4:]}
    assert again == {0: 0, 1: 0, 2: 1, 3: 1}, job_logs(run)  # node 0's count did not move
    assert [e.get("attempt") for e in sink.kinds("restart")] == [1], job_logs(run)
    keys = decode_result(sink.kinds("result")[0].fields)
    assert len(set(keys)) == 1 and keys[0] != round_key("test", "k"), keys  # not round 0's
    monitor = JobMonitor(spec.name, "local", 4, nodes=2, nproc=2, max_restarts=1)
    monitor.feed_many(sink.events)
    snap = monitor.snapshot()
    assert snap["restarts"] == 1 and [r["restarts"] for r in snap["ranks"]] == [1] * 4, snap
