"""What the product's pods see on the emulator's pod network: the rendered manifest as it is."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator import podnet
from tests.k8s_emulator.emulator import Emulator

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(podnet.availability() is not None, reason="no pod network here"),
]

#: Every rank answers its environment, its addresses and where the master's name leads.
CELL = textwrap.dedent(
    """
    import os, socket, torch.distributed as dist
    mine = {"env": dict(os.environ), "hostname": socket.gethostname(),
            "address": socket.gethostbyname(socket.gethostname()),
            "master": socket.gethostbyname(os.environ["MASTER_ADDR"])}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    gathered
    """
)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(env={"GLOO_SOCKET_IFNAME": "eth0"}, network="pods") as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


def test_each_pod_has_its_address_and_the_rendered_environment(cluster: Emulator) -> None:
    name = "netenv"
    spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=1, timeout=240)
    job = jobs.submit(spec, build_payload(CELL, {}, job=name), KubernetesBackend())
    core = client.CoreV1Api(cluster.api_client())
    pods: dict[str, Any] = {}

    def capture() -> None:  # the pods' objects while they exist
        for pod in core.list_namespaced_pod("default").items:
            if pod.status.pod_ip and pod.metadata.name.startswith(name):
                pods[pod.metadata.name] = pod

    try:
        deadline = time.monotonic() + 180
        while len(pods) < 2 and time.monotonic() < deadline:
            capture()
            time.sleep(0.2)
        ranks = job.result(timeout=240)
    finally:
        job.stop(timeout=60)
    assert len(pods) == 2, (sorted(pods), job.logs())
    by_host = {r["hostname"]: r for r in ranks}
    addresses = {p.status.pod_ip for p in pods.values()}
    assert len(addresses) == 2 and all(a.startswith("10.244.") for a in addresses), addresses
    master_ip = pods[f"{name}-master-0"].status.pod_ip
    for pod_name, pod in pods.items():
        seen = by_host[pod_name]  # the pod's host name is its own (pod name: no subdomain)
        assert seen["address"] == pod.status.pod_ip and seen["master"] == master_ip
        container = pod.spec.containers[0]
        declared = {
            e.name: e.value
            for e in container.env
            if e.value_from is None and "$(" not in (e.value or "")
        }
        assert {k: seen["env"].get(k) for k in declared} == declared, pod_name
        assert seen["env"]["MASTER_PORT"] == "23456"  # the same port on every pod, unmoved
