"""The Kubernetes backend on real network faults of the emulator's pod network."""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator import podnet
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.resources import PODS
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(podnet.availability() is not None, reason="no pod network here"),
]

#: Every step is an all_reduce across the nodes, until the test says to finish. Whether to
#: finish is decided by that all_reduce (how many ranks saw the file): a rank that read the
#: file a moment before the other would call barrier() while the other calls all_reduce()
#: again, and both would wait out the group's timeout.
CELL = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    step = 0
    while step < 3000:
        t = torch.tensor([1.0, float(os.path.exists(FINISH))])
        dist.all_reduce(t)
        if t[1].item():
            break
        report(step=step, world=float(t[0].item()))
        time.sleep(0.1)
        step += 1
    dist.barrier()
    "finished"
    """
)

APIS = {"pytorchjob": ("kubeflow-v1",), "trainjob": ("trainer",)}
#: The pods of nodes 0 and 1 of a job (the tests take node 1's link down).
NODE_0 = {"pytorchjob": "{job}-master-0", "trainjob": "{job}-node-0-0-"}
NODE_1 = {"pytorchjob": "{job}-worker-0", "trainjob": "{job}-node-0-1-"}


@pytest.fixture(params=["pytorchjob", "trainjob"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Emulator, str]]:
    with Emulator(
        env={"GLOO_SOCKET_IFNAME": "eth0"}, apis=APIS[request.param], network="pods"
    ) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator, request.param


def group_timeout_spec(name: str, api: str, seconds: int) -> JobSpec:
    """A 2-node job whose collectives time out after ``seconds`` (--env sets the group's
    timeout, as a user would: the one rendered from --timeout is the job's whole limit)."""
    env = (("DISTRAIN_PG_TIMEOUT", str(seconds)),)
    options = (("kubeflow_api", api),)
    return JobSpec(
        name, backend="kubernetes", nodes=2, nproc=1, timeout=300, env=env, options=options
    )


def pod_of(emulator: Emulator, api: str, job: str, table: dict[str, str] = NODE_1) -> str:
    """The pod of node 1 of ``job`` (of the node ``table`` names)."""
    prefix = table[api].format(job=job)
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
    spec = group_timeout_spec(name, api, 60)
    job = jobs.submit(
        spec, build_payload(CELL, {"FINISH": str(finish)}, job=name), KubernetesBackend()
    )
    try:
        wait_for(lambda: len(job.metrics()) >= 6, 180, job.logs)
        began = time.monotonic()
        emulator.net_faults.link_down(pod_of(emulator, api, name), seconds=5)
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


#: The group's timeout of the job whose link stays down (a healthy step's all_reduce between two
#: pods takes milliseconds, seconds on a loaded machine).
CUT_TIMEOUT = 10


def test_a_partition_for_good_is_read_naming_the_pods_that_cannot_reach_each_other(
    cluster: tuple[Emulator, str], tmp_path: Path
) -> None:
    emulator, api = cluster
    name = f"cut-{api[:3]}"
    payload = build_payload(CELL, {"FINISH": str(tmp_path / "never")}, job=name)
    job = jobs.submit(group_timeout_spec(name, api, CUT_TIMEOUT), payload, KubernetesBackend())
    try:
        wait_for(lambda: len(job.metrics()) >= 6, 180, job.logs)
        node_0, node_1 = pod_of(emulator, api, name, NODE_0), pod_of(emulator, api, name)
        emulator.net_faults.link_down(node_1)
        wait_for(lambda: "cannot reach each other" in (job.diagnosis() or ""), 240, job.logs)
        if api == "pytorchjob":  # its master's failure fails the job; JobSet's pods restart
            assert job.wait(120) == "Failed", job.logs()  # in place and wait for node 1
        diagnosis = job.diagnosis() or ""
        pods = f"rank 0 (node 0, pod {node_0}) and rank 1 (node 1, pod {node_1})"
        assert diagnosis.startswith(f"{pods} cannot reach each other: rank "), (
            diagnosis,
            job.logs(),
        )
        assert re.search(
            rf"waited {CUT_TIMEOUT} s in a collective(?: after step \d+)? and heard nothing "
            r"from node [01] ",
            diagnosis,
        ), diagnosis
        # the job's reason (header, sidebar, CLI) names the same ranks, nodes and pods
        if api == "pytorchjob":
            assert job.reason == diagnosis, (job.reason, job.logs())
        else:
            assert pods in job.reason, (job.reason, job.logs())
    finally:
        job.stop(timeout=60)
    wait_for(lambda: not emulator.processes(), 60, emulator.processes)


def test_a_node_that_dies_mid_step_fails_the_job_naming_its_rank_and_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"GLOO_SOCKET_IFNAME": "eth0"}
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
            killed = f"rank 1 (node 1, pod {name}-worker-0) was killed: Error (exit code 137)"
            assert diagnosis.startswith(killed), (diagnosis, job.logs())
            assert job.reason == diagnosis, (job.reason, job.logs())
        finally:
            job.stop(timeout=60)
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)


def test_a_trainjob_node_that_dies_is_named_while_its_pod_restarts_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JobSet restarts the dead node's pod in place; its link stays down, so its new ranks
    never meet the others: the job restarts, naming the node and pod, until it is stopped."""
    env = {"GLOO_SOCKET_IFNAME": "eth0"}
    with Emulator(env=env, apis=APIS["trainjob"], network="pods") as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        name = "dead-tj"
        spec = JobSpec(
            name,
            backend="kubernetes",
            nodes=2,
            nproc=1,
            timeout=300,
            options=(("kubeflow_api", "trainjob"),),
        )
        payload = build_payload(CELL, {"FINISH": str(tmp_path / "never")}, job=name)
        job = jobs.submit(spec, payload, KubernetesBackend())
        try:
            wait_for(lambda: len(job.metrics()) >= 6, 180, job.logs)
            pod = pod_of(emulator, "trainjob", name)
            # its log is read once it failed; that read outlasts its restart (a loaded API
            # server): the restart must still be told after the kill, not before it
            emulator.slow_down(3, resources=["pods/log"], names=pod)
            emulator.net_faults.kill_node(pod)
            said = f"restarting after rank 1 (node 1, pod {pod}) was killed: Error (exit code 137)"
            wait_for(lambda: job.reason.startswith(said), 120, lambda: (job.reason, job.logs()))
            assert job.monitor.state == "Restarting", (job.reason, job.logs())
            pods = {o["metadata"]["name"]: o for o in emulator.store.objects(PODS.key)[0]}
            assert pods[pod]["status"]["containerStatuses"][0]["restartCount"] >= 1
            # the TrainJob runs again (its pods do), its new ranks have not met: still restarting
            wait_for(lambda: job.monitor.reported_state == "Running", 120, job.logs)
            ranks = [
                {key: row.get(key) for key in ("rank", "state", "reason")}
                for row in job.monitor.snapshot()["ranks"]
            ]
            assert job.monitor.state == "Restarting" and job.reason.startswith(said), (
                job.reason,
                ranks,
                job.logs(),
            )
        finally:
            job.stop(timeout=60)
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)
