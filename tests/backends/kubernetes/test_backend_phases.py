"""Time to first step on the emulator: queue, scheduling and image pull phases from its Events."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from kubernetes import client as k

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.job import Job
from jupyter_disttrain.monitor import PhaseRow, summary, waiting_line
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.backends.kubernetes.test_backend import cluster
from tests.backends.kubernetes.test_backend_trainjob import trainer
from tests.k8s_emulator.emulator import Emulator
from tests.waiting import wait_for

__all__ = ["cluster", "trainer"]  # fixtures
pytestmark = pytest.mark.slow

CELL = """
import torch.distributed as dist
for step in range(3):
    dist.barrier()
    report(step=step, loss=1.0 / (step + 1))
dist.get_world_size()
"""
PULL_SECONDS = 3.0
ADMIT_SECONDS = 2.5  # long enough to see the job wait in the queue


def phases_of(job: Job) -> dict[str, PhaseRow]:
    return {row["name"]: row for row in job.monitor.snapshot()["phases"]}


def stuck(job: Job) -> str:
    snap = job.monitor.snapshot()
    return waiting_line(snap["phases"], snap["phase"])


def assert_in_order(rows: list[PhaseRow], why: Any) -> None:
    assert [r["name"] for r in rows] == [
        "queued",
        "scheduled",
        "image",
        "started",
        "rendezvous",
        "first_step",
    ], why
    assert all(r["state"] == "done" for r in rows), why
    for before, after in itertools.pairwise(rows):
        assert before["ended"] == after["started"], why


def events_of(emulator: Emulator, reason: str) -> list[str]:
    api = emulator.api_client()
    try:
        listed = k.CoreV1Api(api).list_namespaced_event(
            "default", field_selector=f"reason={reason}"
        )
        return [str(e.message) for e in listed.items]
    finally:
        api.close()


def test_a_queued_trainjob_waits_in_kueue_then_in_image_pull_and_says_so(
    trainer: Emulator,
) -> None:
    trainer.kueue.admit_after(ADMIT_SECONDS, queue="team-p")
    trainer.set_pull_delay({"*": PULL_SECONDS})
    payload = build_payload(CELL, {}, job="tj-phases")
    spec = JobSpec(
        "tj-phases",
        nodes=2,
        nproc=2,
        backend="kubernetes",
        timeout=240,
        options=(("queue", "team-p"),),
    )
    job = jobs.submit(spec, payload, KubernetesBackend())
    wait_for(lambda: job.monitor.snapshot()["phase"] == "queued", 30, job.logs)
    wait_for(lambda: "Kueue" in stuck(job), 30, lambda: stuck(job))
    print(stuck(job))
    assert stuck(job).startswith("waiting "), stuck(job)
    wait_for(lambda: job.monitor.snapshot()["phase"] == "image", 60, lambda: stuck(job))
    wait_for(lambda: "pulling image" in stuck(job), 30, lambda: stuck(job))
    line = stuck(job)
    print(line)
    assert " in: image pull (rank" in line and ": pod tj-phases-" in line, line
    assert job.result(timeout=240) == 4, job.logs()
    rows = job.monitor.snapshot()["phases"]
    why = f"{rows}\n{job.logs()}"
    assert_in_order(rows, why)
    took = {r["name"]: r["duration_s"] or 0.0 for r in rows}
    assert ADMIT_SECONDS - 0.2 <= took["queued"] < ADMIT_SECONDS + 15, why
    assert took["scheduled"] < 15, why  # (bounds that a loaded machine keeps)
    assert PULL_SECONDS - 0.2 <= took["image"] < PULL_SECONDS + 10, why
    assert took["started"] < 30 and took["rendezvous"] < 60 and took["first_step"] < 30, why
    first = job.monitor.snapshot()["first_step_s"]
    assert first == pytest.approx(sum(took.values()), abs=1e-6), why
    pulled = events_of(trainer, "Pulled")
    took_pulls = [
        float(m)
        for m in re.findall(r"Successfully pulled image \S+ in ([0-9.]+)s ", "\n".join(pulled))
    ]
    assert any(PULL_SECONDS <= t < PULL_SECONDS + 10 for t in took_pulls), pulled
    assert all(m.startswith('Successfully pulled image "') for m in pulled), pulled
    assert any(
        m.startswith("Successfully assigned default/tj-phases-")
        for m in events_of(trainer, "Scheduled")
    )
    # another kernel attaching later reads the same phases from the objects' timestamps
    again = jobs.default_service().attach("tj-phases", KubernetesBackend(), keep=False)
    assert again.wait(60) == "Succeeded"
    replayed = again.monitor.snapshot()
    assert_in_order(replayed["phases"], replayed["phases"])
    assert replayed["first_step_s"] == pytest.approx(first, abs=2.5), (replayed["phases"], rows)
    print("emulator 2x2 TrainJob:", summary(rows), f"(first step after {first:.2f}s)")


def test_an_unschedulable_pytorchjob_waits_in_scheduling_and_names_the_pod(
    cluster: Emulator,
) -> None:
    cluster.make_unschedulable("k8s-phases-worker-*")
    payload = build_payload(CELL, {}, job="k8s-phases")
    spec = JobSpec("k8s-phases", nodes=2, nproc=1, backend="kubernetes", timeout=240)
    job = jobs.submit(spec, payload, KubernetesBackend())
    wait_for(lambda: "unschedulable" in stuck(job), 60, lambda: stuck(job))
    line = stuck(job)
    print(line)
    assert job.monitor.snapshot()["phase"] == "scheduled", line
    assert " in: scheduling (rank 1: pod k8s-phases-worker-0 unschedulable: 0/3 nodes" in line, line

    def held() -> float:
        return float(phases_of(job)["scheduled"]["duration_s"] or 0.0)

    wait_for(lambda: held() >= 1.5, 30, lambda: f"{line}\n{phases_of(job)}")  # held a while
    held_s = held()
    cluster.clear_faults()
    assert job.result(timeout=240) == 2, job.logs()
    rows = job.monitor.snapshot()["phases"]
    assert_in_order(rows, f"{rows}\n{job.logs()}")
    assert phases_of(job)["scheduled"]["duration_s"] >= held_s, rows  # type: ignore[operator]
    print("emulator PyTorchJob:", summary(rows))
