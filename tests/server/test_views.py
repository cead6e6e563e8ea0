"""The sidebar's JSON of a large job: summaries, not a row per rank (views.py)."""

from __future__ import annotations

import json

from jupyter_disttrain.backends.base import JobRecord
from jupyter_disttrain.server.views import job_json
from tests.monitor.scale_streams import SPAN_S, LargeJob


def test_a_large_jobs_sidebar_json_stays_small() -> None:
    job = LargeJob()
    job.start()
    job.train(slow={517: 1.8})
    job.feed("error", 4, job.t0 + SPAN_S, type="ValueError", message="bad batch", traceback="")
    snap = job.monitor.snapshot(now=job.t0 + SPAN_S + 1)
    record = JobRecord("big", "local", "Running", job.world, job.nodes, job.nproc, job.t0)
    shown = job_json(record, snap, now=job.t0 + SPAN_S + 1, detail=True)
    detail = shown["detail"]
    assert detail is not None
    assert [r["rank"] for r in detail["ranks"]] == [4]  # the one rank that differs
    assert detail["ranks_total"] == 1024
    assert detail["summary"][1] == {"state": "Failed", "count": 1, "ranks": "4", "nodes": "0"}
    size = len(json.dumps(shown))
    assert size < 16_000, size  # a row per rank would be about 400 kB
