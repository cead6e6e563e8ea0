"""Time to first step on the local backend: a real 2x2 torchrun job's phases."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.monitor import format_text, summary
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.server.views import job_json
from jupyter_disttrain.spec import JobSpec

pytestmark = pytest.mark.slow

CELL = """
import time, torch.distributed as dist
time.sleep(FIRST)  # before the first step: the job waits in first_step meanwhile
for step in range(3):
    dist.barrier()
    report(step=step, loss=1.0 / (step + 1))
dist.get_world_size()
"""


def test_a_two_by_two_job_goes_through_started_rendezvous_first_step_in_order() -> None:
    seen: list[str | None] = []
    lock = threading.Lock()
    payload = build_payload(CELL, {"FIRST": 1.0}, job="phases-2x2")
    spec = JobSpec("phases-2x2", nodes=2, nproc=2, timeout=120)
    job = jobs.default_service().submit(spec, payload)

    def sample() -> None:  # the current phase as the dashboard would see it
        while not job.done:
            with lock:
                seen.append(job.monitor.snapshot()["phase"])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert job.result(timeout=120) == 4, job.logs()
    sampler.join(10)
    snap = job.monitor.snapshot()
    rows = snap["phases"]
    detail = f"{rows}\n{job.logs()}"
    assert [r["name"] for r in rows] == ["started", "rendezvous", "first_step"], detail
    assert all(r["state"] == "done" for r in rows), detail
    assert snap["phase"] is None, detail
    for before, after in itertools.pairwise(rows):
        assert before["ended"] == after["started"], detail  # one after the other
    durations = {r["name"]: r["duration_s"] or 0.0 for r in rows}
    assert 0.0 < durations["started"] < 60, detail  # agents up and their rendezvous done
    assert 0.0 <= durations["rendezvous"] < 60, detail  # every rank's process group
    assert 1.0 <= durations["first_step"] < 30, detail  # the cell's sleep, then report()
    assert snap["first_step_s"] == pytest.approx(sum(durations.values()), abs=1e-6), detail
    # the phases were seen live, in their order (not every one: a phase may pass between samples)
    order = [None, "started", "rendezvous", "first_step"]
    live = [p for i, p in enumerate(seen) if i == 0 or p != seen[i - 1]]
    assert "first_step" in live, (live, detail)
    indices = [order.index(p) for p in live if p is not None]
    assert indices == sorted(indices), (live, detail)
    text = format_text(snap)
    assert f"time to first step {snap['first_step_s']:.1f}s" in text, text
    assert summary(rows) in text, text
    record = next(r for r in job.backend.list_jobs() if r.name == "phases-2x2")
    row = job_json(record, snap, now=time.time())
    assert row["phases"] == rows and row["first_step_s"] == snap["first_step_s"]
    # what another kernel sees: the recorded events replayed give the same timeline
    again = jobs.default_service().attach("phases-2x2", "local", keep=False)
    assert again.wait(60) == "Succeeded"
    assert again.monitor.snapshot()["phases"] == rows
    print("local 2x2:", summary(rows), f"(first step after {snap['first_step_s']:.2f}s)")
