"""The sidebar's JSON (views.py): summaries for a large job, not a row per rank; a rank's
error that only reports the failing rank's end says so."""

from __future__ import annotations

import json

from jupyter_disttrain.backends.base import JobRecord
from jupyter_disttrain.monitor import CauseRow, ErrorRow
from jupyter_disttrain.server.views import error_json, job_json
from tests.monitor.scale_streams import SPAN_S, LargeJob
from tests.monitor.test_cause import GLOO_CLOSED


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


def test_an_error_that_only_reports_the_failing_ranks_end_reads_lost_its_peer() -> None:
    cause = CauseRow(
        rank=1, category="raised", reason="ValueError: bad batch", consequences=[3], line="rank 1"
    )
    lost = ErrorRow(rank=3, t=2.0, type="RuntimeError", message=GLOO_CLOSED, traceback="")
    own = ErrorRow(rank=1, t=1.0, type="ValueError", message="bad batch", traceback="")
    assert error_json(lost, cause)["peer"] == "lost its peer (rank 1 failed)"
    assert error_json(lost, cause)["message"] == GLOO_CLOSED  # the raw text kept, behind a fold
    assert error_json(own, cause)["peer"] == "" and error_json(lost, None)["peer"] == ""
