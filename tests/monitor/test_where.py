"""The ranks' stacks in the monitor: grouped, the odd rank named, a hang read until output."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import JobMonitor, where_from

T0 = 1_800_000_000.0
SLEEP = [["<distrain-cell>", 11, "<module>"]]
REDUCE = [["<distrain-cell>", 9, "<module>"], ["/t/c10d.py", 3252, "all_reduce"]]


def stacks(
    rank: int,
    frames: list[list[Any]],
    call: str,
    line: int,
    seq: int | None,
    request: str = "h1",
    t: float = T0 + 10,
    op: str = "all_reduce",
) -> ev.Event:
    fields = {
        "request": request,
        "reason": "hang" if request.startswith("h") else "asked",
        "quiet": 5.0,
        "threads": [
            {"name": "MainThread", "main": True, "frames": frames, "call": call, "cell_line": line}
        ],
        "collective": None if seq is None else {"seq": seq, "op": op},
    }
    return ev.Event("stacks", rank, t, fields)


def hung_job(*, seqs: bool = True) -> JobMonitor:
    mon = JobMonitor("j", "local", 4, nodes=2, nproc=2)
    for rank in range(4):
        mon.feed(ev.Event("hello", rank, T0, {"world_size": 4}))
    for rank in (0, 1, 3):
        mon.feed(stacks(rank, REDUCE, "all_reduce", 9, 4 if seqs else None))
    mon.feed(stacks(2, SLEEP, "time.sleep", 11, 3 if seqs else None))
    return mon


def test_a_hang_names_the_rank_that_never_entered_the_collective() -> None:
    mon = hung_job()
    sentence = mon.diagnosis()
    assert sentence == (
        "Hang: no rank wrote anything for 5 s. Rank 2 holds up the others: ranks 0-1,3 wait "
        "in all_reduce (cell line 9); rank 2 is in time.sleep (cell line 11); rank 2 never "
        "entered collective 4 (all_reduce)."
    )
    where = mon.where()
    assert where is not None and [g.ranks for g in where.groups] == [(0, 1, 3), (2,)]
    assert 'File "/t/c10d.py", line 3252, in all_reduce' in where.text()


BARRIER = [["<distrain-cell>", 12, "<module>"], ["/t/c10d.py", 4870, "barrier"]]


def test_ranks_at_one_collective_under_different_operations_are_named() -> None:
    """Rank 1 left its loop for barrier() while rank 0 called all_reduce() again: both are at
    their 5th collective, which no peer can match."""
    mon = JobMonitor("j", "local", 2, nodes=1, nproc=2)
    for rank in range(2):
        mon.feed(ev.Event("hello", rank, T0, {"world_size": 2}))
    mon.feed(stacks(0, REDUCE, "all_reduce", 9, 5))
    mon.feed(stacks(1, BARRIER, "barrier", 12, 5, op="barrier"))
    assert mon.diagnosis() == (
        "Hang: no rank wrote anything for 5 s. Rank 0 waits in all_reduce (cell line 9); "
        "rank 1 waits in barrier (cell line 12); as their collective 5 the ranks called "
        "different operations (all_reduce on rank 0, barrier on rank 1): every rank must "
        "call the same collectives in the same order."
    )
    where = mon.where()
    assert where is not None and where.odd == () and where.missed_collective is None


def test_ranks_that_agree_on_their_collective_are_not_called_mixed() -> None:
    mon = JobMonitor("j", "local", 2, nodes=1, nproc=2)
    for rank in range(2):
        mon.feed(ev.Event("hello", rank, T0, {"world_size": 2}))
        mon.feed(stacks(rank, REDUCE, "all_reduce", 9, 5))
    where = mon.where()
    assert where is not None and where.mixed_collective is None
    assert "different operations" not in where.sentence()


def test_without_the_flight_recorder_the_minority_is_the_odd_rank() -> None:
    where = hung_job(seqs=False).where()
    assert where is not None and where.odd == (2,) and where.missed_collective is None


def test_output_after_the_stacks_ends_the_hang_reading() -> None:
    mon = hung_job()
    assert mon.diagnosis() is not None
    mon.feed(ev.Event("metric", 1, T0 + 20, {"step": 5, "values": {"loss": 1.0}}))
    assert mon.diagnosis() is None
    assert mon.where() is not None  # the stacks stay readable


def test_a_rank_relayed_twice_counts_once_and_missing_ranks_are_named() -> None:
    mon = JobMonitor("j", "local", 3)
    mon.feed(stacks(0, REDUCE, "all_reduce", 9, None, request="a1"))
    mon.feed(stacks(0, SLEEP, "time.sleep", 11, None, request="a1"))
    where = mon.where("a1")
    assert where is not None and where.missing == (1, 2) and len(where.groups) == 1
    assert where.sentence() == "Rank 0 waits in all_reduce (cell line 9); no stacks from ranks 1-2."


def test_grouping_is_by_identical_frames() -> None:
    same = {r: stacks(r, REDUCE, "all_reduce", 9, None).stacks() for r in range(3)}
    assert [g.ranks for g in where_from("h1", same, 3).groups] == [(0, 1, 2)]
    assert where_from("h1", same, 3).odd == ()
