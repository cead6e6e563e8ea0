"""The monitor's resource figures per rank and the job's progress with rate and ETA."""

from __future__ import annotations

import pytest

from jupyter_disttrain.events import Event, job_event, restart_event
from jupyter_disttrain.monitor import JobMonitor, format_text, resource_outliers
from jupyter_disttrain.monitor.usage import ProgressTracker
from jupyter_disttrain.server.views import job_json
from tests.signing import line, parse

T0 = 1_700_000_000.0
MB = 1 << 20


def hello(rank: int, t: float = T0) -> Event:
    return Event("hello", rank, t, {"backend": "gloo", "world_size": 3, "host": "h"})


def resources(rank: int, t: float, **fields: object) -> Event:
    return Event("resources", rank, t, dict(fields))


def progress(t: float, step: int, total: int) -> Event:
    return Event("progress", 0, t, {"step": step, "total": total})


def running(world: int = 3) -> JobMonitor:
    mon = JobMonitor("j", "local", world, nodes=1, nproc=world)
    mon.feed(job_event("Running", t=T0))
    mon.feed_many(hello(r) for r in range(world))
    return mon


def test_figures_are_the_latest_and_absent_ones_are_none_not_zero() -> None:
    mon = running()
    snap = mon.snapshot(now=T0 + 1)
    assert all(r["cpu_pct"] is None and r["rss_bytes"] is None for r in snap["ranks"])
    mon.feed(parse(line("resources", 0, cpu_pct=50.0, rss_bytes=300 * MB), 0))
    mon.feed(resources(0, T0 + 2, cpu_pct=99.5, rss_bytes=310 * MB, mem_limit_bytes=2048 * MB))
    mon.feed(resources(1, T0 + 2, cpu_pct=0.0, rss_bytes=200 * MB))
    mon.feed(resources(2, T0 + 2, cpu_pct="lots", rss_bytes=-1, gpu_util_pct=float("nan")))
    rows = {r["rank"]: r for r in mon.snapshot(now=T0 + 3)["ranks"]}
    assert (rows[0]["cpu_pct"], rows[0]["rss_bytes"]) == (99.5, 310 * MB)
    assert rows[0]["mem_limit_bytes"] == 2048 * MB and rows[0]["gpu_util_pct"] is None
    assert rows[1]["cpu_pct"] == 0.0 and rows[1]["mem_limit_bytes"] is None  # 0 is a figure
    assert all(rows[2][k] is None for k in ("cpu_pct", "rss_bytes", "gpu_util_pct"))


def test_resource_lines_are_no_sign_of_life() -> None:
    mon = running()
    mon.feed(Event("log", 1, T0 + 1, {"text": "epoch 1"}))
    mon.feed_many(resources(1, T0 + 2 + i, cpu_pct=1.0) for i in range(30))
    row = mon.snapshot(now=T0 + 40)["ranks"][1]
    assert row["last_heard"] == T0 + 1 and row["silent_s"] == 39  # "heard" is output only
    assert [line.text for line in mon.log_lines()] == ["epoch 1"]  # not in the log panel


def test_a_restart_forgets_the_old_processes_figures() -> None:
    mon = running()
    mon.feed(resources(1, T0 + 1, cpu_pct=80.0, rss_bytes=900 * MB))
    mon.feed(restart_event(1, "rank 2 failed", t=T0 + 2))
    row = mon.snapshot(now=T0 + 3)["ranks"][1]
    assert row["cpu_pct"] is None and row["rss_bytes"] is None


def test_a_rank_far_above_the_others_says_so() -> None:
    mon = running()
    mon.feed(resources(0, T0 + 1, cpu_pct=1.2, rss_bytes=250 * MB))
    mon.feed(resources(1, T0 + 1, cpu_pct=98.0, rss_bytes=520 * MB))
    mon.feed(resources(2, T0 + 1, cpu_pct=0.8, rss_bytes=240 * MB))
    snap = mon.snapshot(now=T0 + 2)
    assert resource_outliers(snap["ranks"]) == {
        1: "CPU 98% and memory 520.0 MB, far above the others (median 1.0%, 245.0 MB)"
    }
    assert "rank 1: CPU 98% and memory 520.0 MB, far above" in format_text(snap)
    # close figures, or a single rank with figures, are no outlier
    mon.feed(resources(1, T0 + 2, cpu_pct=40.0, rss_bytes=300 * MB))
    assert resource_outliers(mon.snapshot()["ranks"]) == {}
    alone = running(2)
    alone.feed(resources(0, T0 + 1, cpu_pct=100.0, rss_bytes=4096 * MB))
    assert resource_outliers(alone.snapshot()["ranks"]) == {}


def test_progress_rate_and_eta_over_the_last_minute() -> None:
    mon = running()
    assert mon.snapshot()["progress"] is None
    # 1 step/s for two minutes, then 4 steps/s for the last minute
    mon.feed_many(progress(T0 + s, s, 1000) for s in range(0, 121, 1))
    mon.feed_many(progress(T0 + 120 + i, 120 + 4 * i, 1000) for i in range(1, 61))
    p = mon.snapshot()["progress"]
    assert p is not None
    assert (p["step"], p["total"]) == (360, 1000) and p["fraction"] == pytest.approx(0.36)
    assert p["rate_per_s"] == pytest.approx(4.0)
    assert p["eta_s"] == pytest.approx(640 / 4.0)
    text = format_text(mon.snapshot())
    assert "progress: 360 of 1000 steps (36%), 4 steps/s, ETA 2m40s" in text


def test_progress_when_done_when_ended_and_after_a_step_back() -> None:
    tracker = ProgressTracker()
    tracker.add(T0, 1, 10)
    row = tracker.row(ended=False)
    assert row is not None and row["rate_per_s"] is None and row["eta_s"] is None
    tracker.add(T0 + 1, 5, 10)
    tracker.add(T0 + 1, 5, 10)  # the same line twice
    row = tracker.row(ended=False)
    assert row is not None and row["rate_per_s"] == 4.0 and row["eta_s"] == 1.25
    assert tracker.row(ended=True) == {**row, "eta_s": None}  # a stopped job has no ETA
    tracker.add(T0 + 2, 3, 10)  # resumed from an earlier checkpoint: the rate starts again
    row = tracker.row(ended=False)
    assert row is not None and row["step"] == 3 and row["rate_per_s"] is None
    tracker.add(T0 + 3, 10, 10)
    row = tracker.row(ended=True)
    assert row is not None and (row["fraction"], row["eta_s"]) == (1.0, 0.0)
    tracker.add(T0 + 4, "x", 10)
    tracker.add(T0 + 4, 3, 0)
    assert tracker.row(ended=True) == row  # bad lines change nothing


def test_sidebar_json_carries_figures_and_progress() -> None:
    from jupyter_disttrain.backends.base import JobRecord

    mon = running()
    mon.feed(resources(0, T0 + 1, cpu_pct=12.5, rss_bytes=300 * MB))
    mon.feed_many([progress(T0 + 1, 10, 40), progress(T0 + 6, 20, 40)])
    record = JobRecord(
        name="j", backend="local", state="Running", created=T0, world_size=3, nodes=1, nproc=3
    )
    got = job_json(record, mon.snapshot(now=T0 + 7), now=T0 + 7, detail=True)
    assert got["progress"] == {
        "step": 20,
        "total": 40,
        "fraction": 0.5,
        "eta_s": 10.0,
        "rate_per_s": 2.0,
    }
    assert got["detail"] is not None
    ranks = got["detail"]["ranks"]
    assert (ranks[0]["cpu_pct"], ranks[0]["rss_bytes"]) == (12.5, 300 * MB)
    assert ranks[1]["cpu_pct"] is None and ranks[1]["gpu_mem_bytes"] is None
    assert job_json(record, None, now=T0 + 7)["progress"] is None
