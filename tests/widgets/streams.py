"""Event streams for the widget tests: the recorded ones and synthetic generators."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from jupyter_disttrain.events import Event, from_json, job_event
from jupyter_disttrain.monitor import JobMonitor

EVENTS = Path(__file__).resolve().parents[1] / "data" / "events"
NCCL_LOGS = Path(__file__).resolve().parents[3] / "shared" / "nccl-logs"
T0 = 1_700_000_000.0


def recorded(name: str) -> list[Event]:
    """The events of ``tests/data/events/<name>.jsonl``."""
    with open(EVENTS / f"{name}.jsonl", encoding="utf-8") as f:
        return [from_json(line) for line in f if line.strip()]


def upto(events: list[Event], kind: str, nth: int = 0) -> list[Event]:
    """The events before the ``nth`` event of ``kind``."""
    seen = -1
    for i, ev in enumerate(events):
        if ev.kind == kind:
            seen += 1
            if seen == nth:
                return events[:i]
    raise AssertionError(f"no {kind} #{nth}")


def monitor_of(name: str, *, world: int = 4, nodes: int = 2, nproc: int = 2) -> JobMonitor:
    """A monitor fed the whole recorded stream ``name``."""
    mon = JobMonitor(name.replace("_", "-"), "local", world, nodes=nodes, nproc=nproc)
    mon.feed_many(recorded(name))
    return mon


def hello(rank: int, t: float, backend: str = "gloo", world: int = 4) -> Event:
    return Event(
        "hello",
        rank,
        t,
        {
            "local_rank": rank,
            "world_size": world,
            "node_rank": 0,
            "host": "h",
            "pid": 100 + rank,
            "backend": backend,
        },
    )


def log(rank: int | None, t: float, text: str) -> Event:
    return Event("log", rank, t, {"text": text})


def metric(rank: int, t: float, step: int, **values: float) -> Event:
    return Event("metric", rank, t, {"step": step, "values": values})


def mixed_events(n: int, ranks: int = 8) -> Iterator[Event]:
    """``n`` events: mostly log lines, every 10th a metric, round-robin over ranks."""
    yield job_event("Running", t=T0)
    for r in range(ranks):
        yield hello(r, T0, world=ranks)
    for i in range(n):
        rank = i % ranks
        t = T0 + 1 + i * 1e-4
        if i % 10 == 0:
            yield metric(rank, t, i // ranks, loss=1.0 / (1 + i))
        else:
            yield log(rank, t, f"iteration {i // ranks} on rank {rank}")
