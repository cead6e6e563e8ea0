"""Large jobs read as summaries: 1,024 ranks (128 nodes x 8) fed as signed worker lines."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import pytest

from jupyter_disttrain.monitor import format_text
from jupyter_disttrain.monitor.scale import (
    differing,
    parse_ranks,
    ranges,
    slow_ranks,
    slow_sentence,
    summarised,
)
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService
from tests.monitor.scale_streams import SPAN_S, LargeJob


@pytest.fixture(scope="module")
def steady() -> LargeJob:
    job = LargeJob()
    job.start()
    job.train(slow={517: 1.8, 851: 1.8})
    assert not job.rejected, job.rejected[:3]
    return job


def test_ranges_read_as_spans() -> None:
    assert ranges([5, 0, 1, 2, 3, 7, 8]) == "0-3, 5, 7-8"
    assert ranges(list(range(4096)) + list(range(4100, 8192))) == "0-4095, 4100-8191"
    assert summarised(17) and not summarised(16)


def test_slow_ranks_are_those_far_above_the_median_step_time() -> None:
    times = {r: 1.0 for r in range(100)} | {7: 1.8, 42: 1.9, 3: 1.2}
    slow = slow_ranks(times, {r: r // 8 for r in range(100)})
    assert [row["rank"] for row in slow] == [42, 7]
    assert slow_sentence(slow) == "ranks 7, 42 are 1.8-1.9x slower per step than the median"
    assert slow_sentence(slow, nodes=True).startswith("ranks 7, 42 (nodes 0, 5) are")
    assert slow_ranks({0: 1.0, 1: 5.0}, {}) == []  # two ranks are never compared


def test_a_picked_range_is_checked_against_the_job() -> None:
    assert parse_ranks("517, 2048-2050", 4096) == [517, 2048, 2049, 2050]
    with pytest.raises(ValueError, match="not within the job's ranks 0-1023"):
        parse_ranks("1000-1030", 1024)
    with pytest.raises(ValueError, match="'a7' is not a rank or a range"):
        parse_ranks("a7", 1024)


def test_slow_ranks_are_named_with_their_nodes_everywhere(steady: LargeJob) -> None:
    snap = steady.monitor.snapshot(now=steady.t0 + SPAN_S)
    words = "ranks 517, 851 (nodes 64, 106) are 1.8x slower per step than the median"
    assert snap["slow_line"] == words
    assert [row["rank"] for row in snap["slow"]] == [517, 851]
    assert steady.monitor.diagnosis() == words  # job.diagnosis() reads this
    assert words in format_text(snap)


def test_the_summary_counts_states_and_lists_only_the_ranks_that_differ(steady: LargeJob) -> None:
    snap = steady.monitor.snapshot(now=steady.t0 + SPAN_S)
    assert snap["summary"] == [
        {"state": "Running", "count": 1024, "ranks": "0-1023", "nodes": "0-127"}
    ]
    assert [r["rank"] for r in differing(snap["ranks"], [517, 851])] == [517, 851]
    text = format_text(snap)
    assert "ranks: 1024 Running (ranks 0-1023)" in text
    assert len(text.splitlines()) < 20, text


def test_a_failing_rank_is_named_with_its_node() -> None:
    job = LargeJob()
    job.start()
    job.train(stop_at={517: 10})
    trace = "Traceback (most recent call last):\nValueError: bad batch at step 10"
    job.feed(
        "error",
        517,
        job.t0 + SPAN_S,
        type="ValueError",
        message="bad batch at step 10",
        traceback=trace,
    )
    snap = job.monitor.snapshot(now=job.t0 + SPAN_S + 1)
    assert snap["state"] == "Failed"
    assert snap["diagnosis"] == (
        "rank 517 (node 64) failed: ValueError: bad batch at step 10; "
        "1023 ranks stopped as a consequence"
    )
    assert {"state": "Failed", "count": 1, "ranks": "517", "nodes": "64"} in snap["summary"]
    running = next(g for g in snap["summary"] if g["state"] == "Running")
    assert running["ranks"] == "0-516, 518-1023"
    text = format_text(snap)
    assert re.search(r"^517\s+64\s+node64\s+Failed", text, re.M), text


def test_a_hung_node_is_named_as_a_range_of_ranks() -> None:
    job = LargeJob()
    job.start()
    job.train()
    job.hang(range(8, 16), job.t0 + SPAN_S + 1)
    snap = job.monitor.snapshot(now=job.t0 + SPAN_S + 2)
    assert snap["state"] == "Hung"
    assert snap["diagnosis"] is not None
    assert "Ranks 8-15 (node 1) hold up the others" in snap["diagnosis"], snap["diagnosis"]
    assert "ranks 8-15 (node 1) are in time.sleep (cell line 11)" in snap["diagnosis"]
    assert {"state": "Hung", "count": 8, "ranks": "8-15", "nodes": "1"} in snap["summary"]


def test_the_snapshot_of_a_large_job_stays_json(steady: LargeJob) -> None:
    snap = steady.monitor.snapshot(now=steady.t0 + SPAN_S)
    assert json.loads(json.dumps(snap))["summary"][0]["count"] == 1024


_SLEEPER = """
import os, time
rank = int(os.environ["RANK"])
end = time.monotonic() + 40
step = 0
while time.monotonic() < end:
    report(step=step, loss=1.0 / (step + 1))
    time.sleep(0.6 if rank == 3 else 0.2)
    step += 1
"""


def test_a_real_local_job_names_the_rank_that_sleeps_each_step(home: Path) -> None:
    """2 nodes x 2 ranks on this machine; rank 3 takes three times as long per step."""
    service = JobService()
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    spec = service.spec(parser.parse_args(["--name", "slow-rank", "--nodes", "2", "--nproc", "2"]))
    outcome = service.run_and_follow(service.plan(spec, _SLEEPER), _Quiet(), wait=False)
    job = outcome.job
    assert job is not None
    try:
        deadline = time.monotonic() + 150
        said = job.diagnosis()
        while time.monotonic() < deadline and not job.done:
            said = job.diagnosis()
            if said and "slower per step" in said:
                break
            time.sleep(0.2)  # polling the job's reading, not waiting for it
        slow = job.monitor.slow()
        logs = job.logs(tail=40)
        assert said is not None and re.fullmatch(
            r"rank 3 is \d\.\dx slower per step than the median", said
        ), f"{said!r} {job.status()}\n{logs}"
        assert slow and slow[0]["rank"] == 3 and slow[0]["factor"] > 2.0, f"{slow}\n{logs}"
        assert "slower per step" in format_text(job.monitor.snapshot())
    finally:
        job.stop(wait=True, timeout=60)


class _Quiet:
    """A run view that shows nothing (the test reads the job itself)."""

    def on_event(self, event: object) -> None:
        pass

    def attach(self, job: object) -> None:
        pass

    def close(self) -> None:
        pass
