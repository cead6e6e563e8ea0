"""Network faults on the pod network: links down, drops between pods, hidden names, dead nodes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.k8s_emulator import Emulator, podnet, procs
from tests.k8s_emulator.netfaults import ANNOTATION
from tests.k8s_emulator.resources import PODS

pytestmark = pytest.mark.skipif(
    podnet.availability() is not None, reason=f"no pod network: {podnet.availability()}"
)

SERVE = ["python", "-m", "http.server", "8000", "--bind", "0.0.0.0"]


def wait(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(network="pods") as emulator:
        core = client.CoreV1Api(emulator.api_client())
        service = {"metadata": {"name": "svc"}, "spec": {"selector": {"app": "web"}}}
        core.create_namespaced_service("default", service)
        for name in ("a", "b", "c"):
            body = {
                "metadata": {"name": name, "labels": {"app": "web"} if name == "a" else {}},
                "spec": {"containers": [{"name": "web", "image": "python", "command": SERVE}]},
            }
            core.create_namespaced_pod("default", body)
        for name in ("a", "b", "c"):
            wait(lambda name=name: reaches(emulator, name, name), f"pod {name} serving")
        yield emulator


def reaches(emu: Emulator, source: str, target: str) -> bool:
    """Whether pod ``source`` connects to pod ``target``'s port 8000 within a second."""
    assert emu.kubelet is not None and emu.podnet is not None
    pods = {w.name: w for w in emu.kubelet.workers()}
    if source not in pods or target not in pods or not pods[target].attached:
        return False
    try:
        emu.podnet.connect(pods[source].uid, pods[target].address, 8000, 1.0).close()
    except OSError:
        return False
    return True


def hosts_of(emu: Emulator, name: str) -> str:
    assert emu.kubelet is not None
    worker = next(w for w in emu.kubelet.workers() if w.name == name)
    assert worker.hosts_file is not None
    return worker.hosts_file.read_text()


def test_a_link_down_for_a_while_cuts_the_pod_off_then_heals(emu: Emulator) -> None:
    emu.net_faults.link_down("b", seconds=1.5)
    assert not reaches(emu, "a", "b") and not reaches(emu, "b", "c")
    assert reaches(emu, "a", "c")
    wait(lambda: reaches(emu, "a", "b"), "the link to come back")


def test_dropping_between_two_pods_leaves_the_others(emu: Emulator) -> None:
    emu.net_faults.drop_between("a", "b")
    assert not reaches(emu, "a", "b") and not reaches(emu, "b", "a")
    assert reaches(emu, "a", "c") and reaches(emu, "c", "b")
    emu.net_faults.heal()
    assert reaches(emu, "a", "b")


def test_a_hidden_service_resolves_to_nothing(emu: Emulator) -> None:
    assert " svc.default.svc.cluster.local" in hosts_of(emu, "b")
    emu.net_faults.hide_service("svc")
    assert " svc " not in hosts_of(emu, "b") and "svc.default" not in hosts_of(emu, "b")
    emu.net_faults.heal()
    assert " svc.default.svc.cluster.local" in hosts_of(emu, "b")


def test_a_dead_node_takes_its_processes_and_the_annotation_arms_faults(emu: Emulator) -> None:
    core = client.CoreV1Api(emu.api_client())
    patch = {"metadata": {"annotations": {ANNOTATION: "link-down"}}}
    core.patch_namespaced_pod("c", "default", patch)
    wait(lambda: not reaches(emu, "a", "c"), "the annotation to take c's link down")
    emu.net_faults.kill_node("b")
    wait(
        lambda: (
            core.read_namespaced_pod("b", "default").status.container_statuses[0].restart_count >= 1
            or not reaches(emu, "a", "b")
        ),
        "b's processes gone",
    )
    assert not reaches(emu, "a", "b")


def test_no_namespace_is_left_after_faults() -> None:
    with Emulator(network="pods") as emulator:
        assert emulator.podnet is not None
        prefix = emulator.podnet.prefix
        core = client.CoreV1Api(emulator.api_client())
        spec = {"containers": [{"name": "c", "image": "x", "command": SERVE}]}
        body = {"metadata": {"name": "p"}, "spec": spec}
        core.create_namespaced_pod("default", body)
        wait(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running", "running")
        emulator.net_faults.link_down("p")
    assert podnet.leftovers(prefix) == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert prefix not in listed.stdout


def test_a_pod_waiting_in_an_init_container_for_a_hidden_name_ends_when_deleted(
    emu: Emulator,
) -> None:
    """As a Training Operator Worker waits in init-pytorch for its Master's name."""
    core = client.CoreV1Api(emu.api_client())
    emu.net_faults.hide_service("svc")
    loop = "until nslookup svc; do echo waiting for svc; sleep 1; done"
    body = {
        "metadata": {"name": "w"},
        "spec": {
            "initContainers": [{"name": "wait", "image": "alpine", "command": ["sh", "-c", loop]}],
            "containers": [{"name": "main", "image": "python", "command": ["python", "-V"]}],
        },
    }
    core.create_namespaced_pod("default", body)

    def said() -> str:
        try:
            return str(core.read_namespaced_pod_log("w", "default", container="wait"))
        except client.ApiException:  # not started yet
            return ""

    wait(lambda: "waiting for svc" in said(), "the init container waiting for the hidden name")
    assert emu.kubelet is not None
    worker = emu.kubelet.worker(emu.api.get(PODS, "default", "w"))
    assert worker is not None and procs.members(worker.marker)
    core.delete_namespaced_pod("w", "default", grace_period_seconds=1)
    wait(lambda: not procs.members(worker.marker), "the waiting pod's processes to end")
    wait(
        lambda: "w" not in {p.metadata.name for p in core.list_namespaced_pod("default").items},
        "the pod gone",
    )
