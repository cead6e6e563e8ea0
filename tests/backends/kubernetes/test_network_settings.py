"""The Kubernetes backend on a master name that resolves to nothing and a wrong interface."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.watch import NAME_TRIES
from jupyter_disttrain.job import Job
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator import podnet
from tests.k8s_emulator.emulator import Emulator
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(podnet.availability() is not None, reason="no pod network here"),
]

CELL = "import torch.distributed as dist\ndist.barrier()\n'finished'\n"
#: The hidden-master jobs' limit: ample for the launchers to say the name does not resolve
#: (a few seconds after their pods start, even on a loaded machine); the test waits it out.
HIDDEN_TIMEOUT = 30


#: Per API: the emulator's API groups, the Service the master's name comes from, that name,
#: where it is reached, and what says it does not resolve (``{tries}``: how many times it failed,
#: read when the job's watch polls the init container's log, so at least ``NAME_TRIES``).
HIDDEN = {
    "trainjob": (
        ("trainer",),
        "{job}",
        "{job}-node-0-0.{job}",
        "{job}-node-0-0.{job}:29500",
        "Temporary failure in name resolution",
    ),
    "pytorchjob": (
        ("kubeflow-v1",),
        "{job}-master-0",
        "{job}-master-0",
        "{job}-master-0",
        "pod {job}-worker-0's init-pytorch could not resolve it {tries} times",
    ),
}


def test_a_master_service_that_resolves_to_nothing_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both APIs' jobs side by side in one cluster: their time limits run out together."""
    apis = {group for entry in HIDDEN.values() for group in entry[0]}
    with Emulator(network="pods", apis=apis) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        submitted = {api: _submit_hidden(emulator, api) for api in sorted(HIDDEN)}
        try:
            for api, job in submitted.items():
                _check_hidden(api, job)
        finally:
            for job in submitted.values():
                job.stop(timeout=60)
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)


def _submit_hidden(emulator: Emulator, api: str) -> Job:
    """Job ``hidden-<api>`` through ``api``, its master's Service hidden first."""
    service = HIDDEN[api][1]
    name = f"hidden-{api[:3]}"
    emulator.net_faults.hide_service(service.format(job=name))
    options = (("kubeflow_api", api),)
    spec = JobSpec(
        name, backend="kubernetes", nodes=2, nproc=1, timeout=HIDDEN_TIMEOUT, options=options
    )
    return jobs.submit(spec, build_payload(CELL, {}, job=name), KubernetesBackend())


def _check_hidden(api: str, job: Job) -> None:
    """Job ``hidden-<api>`` names its master's unresolvable address, then fails at its limit."""
    name = f"hidden-{api[:3]}"
    master, address, said = (text.format(job=name, tries="{tries}") for text in HIDDEN[api][2:])
    # read while the launchers still wait, and kept once the job's time is up
    wait_for(lambda: "does not resolve" in (job.diagnosis() or ""), 120, job.logs)
    assert job.wait(120) == "Failed", (api, job.logs())
    diagnosis = job.diagnosis() or ""
    expected = (
        f"the master address {master} does not resolve ({said}): no rank could "
        f"reach {address} to start"
    )
    pattern = re.escape(expected).replace(re.escape("{tries}"), r"(?P<tries>\d+)")
    found = re.match(pattern, diagnosis)
    assert found, (api, diagnosis, job.logs())
    tries = found.groupdict().get("tries")
    assert tries is None or int(tries) >= NAME_TRIES, (api, diagnosis)


def test_a_gloo_interface_the_pod_does_not_have_is_named_with_the_ones_it_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Emulator(network="pods") as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        name = "wrong-if"
        env = (("GLOO_SOCKET_IFNAME", "eth1"),)
        spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=1, timeout=240, env=env)
        job = jobs.submit(spec, build_payload(CELL, {}, job=name), KubernetesBackend())
        try:
            assert job.wait(200) == "Failed", job.logs()
            diagnosis = job.diagnosis() or ""
            said = "GLOO_SOCKET_IFNAME=eth1: no such interface eth1 on "
            assert said in diagnosis and "(it has eth0, lo)" in diagnosis, (diagnosis, job.logs())
            assert diagnosis.startswith("rank "), diagnosis
        finally:
            job.stop(timeout=60)
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)
