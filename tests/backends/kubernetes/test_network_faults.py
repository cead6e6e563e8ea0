"""The Kubernetes backend on real network faults of the emulator's pod network."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.backends.kubernetes.test_backend import wait_for
from tests.k8s_emulator import podnet
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.resources import PODS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(podnet.availability() is not None, reason="no pod network here"),
]

#: Every step is an all_reduce across the nodes, until the test says to finish.
CELL = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    step = 0
    while not os.path.exists(FINISH) and step < 3000:
        t = torch.ones(1)
        dist.all_reduce(t)
        report(step=step, world=float(t.item()))
        time.sleep(0.1)
        step += 1
    dist.barrier()
    "finished"
    """
)

APIS = {"pytorchjob": ("kubeflow-v1",), "trainjob": ("trainer",)}
#: The pod of node 1 of a job (the one whose link the tests take down).
NODE_1 = {"pytorchjob": "{job}-worker-0", "trainjob": "{job}-node-0-1-"}


@pytest.fixture(params=["pytorchjob", "trainjob"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Emulator, str]]:
    env = {"GLOO_SOCKET_IFNAME": "eth0", "DISTRAIN_PG_TIMEOUT": "60"}
    with Emulator(env=env, apis=APIS[request.param], network="pods") as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator, request.param


def pod_of_node_1(emulator: Emulator, api: str, job: str) -> str:
    prefix = NODE_1[api].format(job=job)
    names = [o["metadata"]["name"] for o in emulator.store.objects(PODS.key, "default")[0]]
    found = [n for n in names if n == prefix or (prefix.endswith("-") and n.startswith(prefix))]
    assert len(found) == 1, names
    return found[0]


def test_a_partition_that_heals_within_the_group_timeout_lets_the_job_finish(
    cluster: tuple[Emulator, str], tmp_path: Path
) -> None:
    emulator, api = cluster
    name = f"heal-{api[:3]}"
    finish = tmp_path / "finish"
    options = (("kubeflow_api", api),)
    spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=1, timeout=300, options=options)
    job = jobs.submit(
        spec, build_payload(CELL, {"FINISH": str(finish)}, job=name), KubernetesBackend()
    )
    try:
        wait_for(lambda: len(job.metrics()) >= 6, 180, job.logs)
        began = time.monotonic()
        emulator.net_faults.link_down(pod_of_node_1(emulator, api, name), seconds=5)
        before = len(job.metrics())
        wait_for(lambda: len(job.metrics()) >= before + 20, 120, job.logs)  # steps go on
        # ten steps take about a second; they waited for the link in all_reduce
        assert time.monotonic() - began >= 4.5, job.logs()
        finish.touch()
        assert job.result(timeout=180) == "finished", job.logs()
        assert job.status() == "Succeeded"
    finally:
        finish.touch()
        job.stop(timeout=60)
    wait_for(lambda: not emulator.processes(), 60, emulator.processes)


def test_a_node_that_dies_mid_step_fails_the_job_naming_its_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"GLOO_SOCKET_IFNAME": "eth0", "DISTRAIN_PG_TIMEOUT": "20"}
    with Emulator(env=env, network="pods") as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        name = "dead-node"
        spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=1, timeout=300)
        payload = build_payload(CELL, {"FINISH": str(tmp_path / "never")}, job=name)
        job = jobs.submit(spec, payload, KubernetesBackend())
        try:
            wait_for(lambda: len(job.metrics()) >= 6, 180, job.logs)
            emulator.net_faults.kill_node(f"{name}-worker-0")  # node 1: rank 1
            assert job.wait(240) == "Failed", job.logs()
            diagnosis = job.diagnosis() or ""
            assert diagnosis.startswith("rank 1 was killed: Error (exit code 137)"), diagnosis
        finally:
            job.stop(timeout=60)
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)
