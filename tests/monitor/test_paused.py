"""Paused ranks in the monitor: state, reasons, display state, diagnosis, and the end of a pause."""

from __future__ import annotations

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import JobMonitor

T0 = 1_800_000_000.0


def running(world: int = 4) -> JobMonitor:
    mon = JobMonitor("job", "local", world, nodes=2, nproc=2)
    mon.feed(ev.job_event("Running", "Started", t=T0))
    for rank in range(world):
        mon.feed(
            ev.Event("hello", rank, T0 + 0.1, {"node_rank": rank // 2, "local_rank": rank % 2})
        )
    return mon


def paused(rank: int, t: float, **extra: object) -> ev.Event:
    fields = {
        "file": "<distrain-cell>",
        "line": 9,
        "function": "<module>",
        "port": 4242,
        "pid": 100 + rank,
        **extra,
    }
    return ev.Event("paused", rank, t, fields)


def test_a_paused_rank_is_paused_and_the_others_wait_for_it() -> None:
    mon = running()
    mon.feed(paused(1, T0 + 1))
    assert [(p.rank, p.node, p.place, p.port) for p in mon.paused()] == [(1, 0, "cell:9", 4242)]
    rows = {r.rank: r for r in mon.ranks()}
    assert rows[1].state == "Paused" and rows[1].reason == "rank 1 paused at cell:9 in <module>"
    assert {rows[r].reason for r in (0, 2, 3)} == {"waiting for rank 1 (paused)"}
    assert mon.display_state == "Paused" and mon.state == "Running"
    assert mon.diagnosis() == "rank 1 paused at cell:9 in <module>"
    mon.feed(ev.Event("resumed", 1, T0 + 2, {}))
    rows = {r.rank: r for r in mon.ranks()}
    assert mon.paused() == [] and rows[1].state == "Running"
    assert {r.reason for r in rows.values()} == {""}
    assert mon.display_state == "Running" and mon.diagnosis() is None


def test_a_post_mortem_pause_names_the_exception_and_a_rank_that_ends_is_not_paused() -> None:
    mon = running()
    mon.feed(paused(2, T0 + 1, exception="KeyError: 'missing'"))
    mon.feed(paused(3, T0 + 1.5))
    assert [p.rank for p in mon.paused()] == [2, 3]
    assert (
        mon.paused()[0].sentence()
        == "rank 2 paused at cell:9 in <module> after KeyError: 'missing'"
    )
    mon.feed(ev.Event("done", 3, T0 + 2, {"seconds": 1.0}))
    assert [p.rank for p in mon.paused()] == [2]


def test_a_line_without_a_port_changes_nothing() -> None:
    mon = running()
    mon.feed(ev.Event("paused", 1, T0 + 1, {"file": "x.py", "line": 3}))
    assert mon.paused() == [] and mon.display_state == "Running"


def test_a_session_rank_whose_cell_raised_pauses_in_its_post_mortem() -> None:
    """``%distrain_debug --last``: the rank reads Raised from the cell before; it pauses."""
    mon = running(2)
    mon.feed(ev.Event("cell", 1, T0 + 1, {"phase": "end", "status": "error"}))
    assert {r.rank: r.state for r in mon.ranks()}[1] == "Raised"
    mon.feed(paused(1, T0 + 2, exception="KeyError: 'nope'"))
    assert [p.rank for p in mon.paused()] == [1]
    assert {r.rank: r.state for r in mon.ranks()}[1] == "Paused"
