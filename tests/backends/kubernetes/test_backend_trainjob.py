"""TrainJobs over HTTP on the emulator playing Kubeflow Trainer v2 (and Kueue)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.backends.kubernetes.test_backend import CELL, run_quickstart
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """A cluster serving Kubeflow Trainer v2 only; the default kubeconfig points at it."""
    env = {"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}
    with Emulator(env=env, apis=("trainer",)) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


def spec(name: str, *options: tuple[str, str], **kw: Any) -> JobSpec:
    return JobSpec(name, backend="kubernetes", options=options, **kw)


def test_the_ddp_cell_runs_as_a_trainjob_with_every_ranks_metrics(trainer: Emulator) -> None:
    backend = KubernetesBackend()
    payload = build_payload(CELL, {"STEPS": 5}, job="tj-ddp")
    plan = backend.plan(spec("tj-ddp", nodes=2, nproc=2, timeout=240), payload)
    assert plan.objects[1]["kind"] == "TrainJob"  # discovery: the cluster serves Trainer v2
    job = jobs.default_service().run(plan)
    assert job.result(timeout=240) == {"world": 4, "rank": 0}, job.logs()
    steps = {r: sorted(row["step"] for row in job.metrics() if row["rank"] == r) for r in range(4)}
    assert steps == {r: [0, 1, 2, 3, 4] for r in range(4)}, (steps, job.logs())
    assert job.status() == "Succeeded"
    snap = job.monitor.snapshot()
    assert [r["state"] for r in snap["ranks"]] == ["Succeeded"] * 4, snap["ranks"]
    stats = trainer.stats()
    assert stats.streams.peak <= 4, stats  # O(1) long-lived connections, all ranks' metrics
    assert "cost $HOME `date` 3" in backend.logs("tj-ddp", rank=3)
    listed = {r.name: r for r in backend.list_jobs()}
    assert listed["tj-ddp"].state == "Succeeded" and listed["tj-ddp"].world_size == 4
    again = jobs.attach("tj-ddp", KubernetesBackend())
    assert again.wait(60) == "Succeeded" and again.result() == {"world": 4, "rank": 0}
    assert backend.stop("tj-ddp")
    wait_for(lambda: not trainer.processes(), 30, trainer.processes)


def test_a_queued_trainjob_shows_queued_until_kueue_admits_it(trainer: Emulator) -> None:
    trainer.kueue.set_full("team-a")
    cell = "report(step=0, up=1)\n7"
    payload = build_payload(cell, {}, job="tj-queued")
    job = jobs.submit(
        spec("tj-queued", ("queue", "team-a"), nodes=2, nproc=1), payload, KubernetesBackend()
    )
    wait_for(lambda: job.monitor.reason.startswith("waiting for Kueue"), 30, job.logs)
    assert job.status() == "Pending" and "team-a" in job.reason
    time.sleep(2)  # a full queue admits nothing
    assert job.status() == "Pending" and not trainer.processes()
    trainer.kueue.set_full("team-a", False)
    assert job.result(timeout=180) == 7, job.logs()
    wait_for(lambda: not trainer.processes(), 30, trainer.processes)


def test_runtimes_are_listed_and_an_unknown_one_names_the_choices(trainer: Emulator) -> None:
    backend = KubernetesBackend()
    jax_runtime, runtime = sorted(backend.runtimes(), key=lambda r: r.name)
    assert (runtime.name, runtime.scope, runtime.framework) == (
        "torch-distributed",
        "cluster",
        "torch",
    )
    assert (jax_runtime.name, jax_runtime.framework) == ("jax-distributed", "jax")
    assert runtime.image.startswith("pytorch/pytorch:") and runtime.nodes == 1
    payload = build_payload("1", {}, job="tj-nort")
    with pytest.raises(SpecError, match="this cluster offers: jax-distributed, torch-distributed"):
        backend.plan(spec("tj-nort", ("runtime", "torch-missing")), payload)


def test_a_cluster_without_trainer_v2_gets_pytorchjobs_or_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Emulator() as v1:
        monkeypatch.setenv("KUBECONFIG", str(v1.write_kubeconfig(tmp_path / "kubeconfig")))
        backend = KubernetesBackend()
        payload = build_payload("1", {}, job="v1-only")
        assert backend.plan(spec("v1-only"), payload).objects[1]["kind"] == "PyTorchJob"
        with pytest.raises(SpecError, match=r"no Kubeflow Trainer v2.*--kubeflow-api pytorchjob"):
            backend.plan(spec("v1-only", ("kubeflow_api", "trainjob")), payload)
        assert backend.runtimes() == []


def test_the_quickstart_cell_runs_as_a_trainjob(trainer: Emulator) -> None:
    kjob = run_quickstart("tj-quickstart")
    assert kjob.plan.objects[1]["kind"] == "TrainJob"
    wait_for(lambda: not trainer.processes(), 30, trainer.processes)


def test_kueue_preemption_and_readmission_show_as_state_changes(
    trainer: Emulator, tmp_path: Path
) -> None:
    finish = tmp_path / "finish"
    cell = (
        "import os, time\nfor i in range(3000):\n    report(step=i, up=1)\n"
        "    if os.path.exists(FINISH):\n        break\n    time.sleep(0.1)\n'done'"
    )
    payload = build_payload(cell, {"FINISH": str(finish)}, job="tj-preempt")
    job = jobs.submit(
        spec("tj-preempt", ("queue", "team-b"), nodes=1, nproc=1), payload, KubernetesBackend()
    )
    wait_for(lambda: job.status() == "Running", 120, job.logs)
    trainer.kueue.set_full("team-b")
    trainer.kueue.preempt("tj-preempt")
    wait_for(lambda: job.monitor.reason.startswith("waiting for Kueue"), 60, job.logs)
    assert job.status() == "Pending"
    wait_for(lambda: not trainer.processes(), 30, trainer.processes)  # its pods are gone
    trainer.kueue.set_full("team-b", False)
    wait_for(lambda: job.status() == "Running", 120, job.logs)
    finish.touch()
    assert job.result(timeout=120) == "done", job.logs()
