"""The emulator explains itself: ``describe()``, the failing-test report, and pod workers that
never touch a pod made again under their pod's name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from jupyter_disttrain.backends.local.plan import PORT_FLOOR, ephemeral_range
from tests.conftest import REPO
from tests.k8s_emulator import Emulator
from tests.k8s_emulator.describe import reports
from tests.k8s_emulator.resources import PODS
from tests.k8s_emulator.rewrite import free_port
from tests.k8s_emulator.store import Event
from tests.k8s_emulator_test.clusters import SLEEP, wait_for


def pod(name: str, code: str = SLEEP) -> dict[str, object]:
    command = ["python", "-c", code]
    spec = {"containers": [{"name": "main", "image": "python:3.11", "command": command}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def running(core: client.CoreV1Api, name: str) -> bool:
    return core.read_namespaced_pod(name, "default").status.phase == "Running"


def test_describe_shows_pods_workers_processes_events_queues_and_threads(
    k8s_emulator: Emulator,
) -> None:
    core = client.CoreV1Api(k8s_emulator.api_client())
    code = "print('hello there', flush=True)\n" + SLEEP
    core.create_namespaced_pod("default", pod("shown", code))
    wait_for(lambda: running(core, "shown"), what="pod shown running")
    # both of its lines (then it sleeps): a line written between two readings would differ
    wait_for(
        lambda: (
            k8s_emulator.pod_log("shown").startswith("hello there\n")
            and len(k8s_emulator.pod_log("shown").splitlines()) == 2
        ),
        what="the pod's two lines",
    )
    text = k8s_emulator.describe()
    assert f"--- emulator {k8s_emulator.id} on {k8s_emulator.url}" in text, text
    assert "default/shown Running on emulator-node: main=running" in text, text
    assert "worker shown: alive, sandbox ready" in text, text
    (proc,) = k8s_emulator.processes()
    assert "container main: {'running'" in text and f"pid {proc.pid} " in text, text
    assert f"      run 0 live: {proc.pid} " in text, text  # survivors of a run would show too
    assert "      | hello there" in text, text  # the container log's last lines
    assert "Normal Started Pod/shown: Started container main" in text, text
    assert "training-operator: thread alive, queue 0, pending [], failing {}" in text, text
    assert "pod worker shown: wait:" in text, text  # where each emulator thread waits
    assert k8s_emulator.describe().count("\n") == text.count("\n")  # reading changes nothing


def test_a_stopped_emulator_reports_what_it_saw_when_a_failure_stopped_it() -> None:
    emulator = Emulator().start()
    core = client.CoreV1Api(emulator.api_client())
    core.create_namespaced_pod("default", pod("seen"))
    wait_for(lambda: running(core, "seen"), what="pod seen running")
    assert "default/seen Running" in reports()  # running: described as it is now
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("the test failed")
        finally:
            emulator.stop()
    assert emulator.final_state is not None and "default/seen Running" in emulator.final_state
    assert "(when it was stopped)\n--- emulator" in reports()
    clean = Emulator().start()
    clean.stop()
    assert clean.final_state is None  # stopped without a failure: nothing kept


def test_a_failing_test_with_an_emulator_reports_the_emulator_state(tmp_path: Path) -> None:
    test = tmp_path / "test_fails.py"
    test.write_text(
        textwrap.dedent(
            """
            from kubernetes import client
            from tests.k8s_emulator.fixtures import k8s_emulator

            def test_fails(k8s_emulator):
                core = client.CoreV1Api(k8s_emulator.api_client())
                spec = {"containers": [{"name": "c", "image": "i", "command": ["true"]}]}
                body = {"metadata": {"name": "never"}, "spec": spec}
                k8s_emulator.make_unschedulable("never")
                core.create_namespaced_pod("default", body)
                assert False, "the job did not start"
            """
        )
    )
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.k8s_emulator.fixtures",
            str(test),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 1, got.stdout + got.stderr
    assert "emulator state" in got.stdout, got.stdout
    assert "default/never Pending on unscheduled" in got.stdout, got.stdout


def test_reports_add_what_the_followed_job_saw(
    k8s_emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_disttrain import service
    from jupyter_disttrain.backends.kubernetes import KubernetesBackend
    from jupyter_disttrain.payload import build_payload
    from jupyter_disttrain.spec import JobSpec

    monkeypatch.setenv("KUBECONFIG", str(k8s_emulator.write_kubeconfig(tmp_path / "kubeconfig")))
    k8s_emulator.make_unschedulable("stuck-*")
    spec = JobSpec("stuck", backend="kubernetes", timeout=60)
    job = service.submit(spec, build_payload("1", {}, job="stuck"), KubernetesBackend())
    try:
        wait_for(lambda: "FailedScheduling" in job.reason, 60, "the FailedScheduling reason")
        text = reports()
        assert "PyTorchJob default/stuck: Created=True" in text, text
        assert "default/stuck-master-0 Pending on unscheduled" in text, text
        assert "followed job stuck: Pending (FailedScheduling" in text, text
    finally:
        job.stop(timeout=30)


def test_a_pod_worker_never_writes_to_a_new_pod_under_its_pods_name(
    k8s_emulator: Emulator,
) -> None:
    core = client.CoreV1Api(k8s_emulator.api_client())
    core.create_namespaced_pod("default", pod("again"))
    wait_for(lambda: running(core, "again"), what="first pod running")
    assert k8s_emulator.kubelet is not None
    old = k8s_emulator.kubelet.worker(k8s_emulator.api.get(PODS, "default", "again"))
    assert old is not None
    core.delete_namespaced_pod("again", "default", grace_period_seconds=0)
    core.create_namespaced_pod("default", pod("again"))
    wait_for(lambda: running(core, "again"), what="second pod running")
    old.join(15)
    assert not old.is_alive()
    new = k8s_emulator.api.get(PODS, "default", "again")
    assert new["metadata"]["uid"] != old.uid
    old.publish()  # the old worker's last status update: not onto the new pod
    old.removed = False  # as after a graceful deletion, which the worker itself finalises
    old._teardown()  # nor its final delete
    after = k8s_emulator.api.get(PODS, "default", "again")
    assert after["metadata"]["uid"] == new["metadata"]["uid"]
    assert after["status"] == new["status"], (after["status"], new["status"])
    assert after["status"]["containerStatuses"][0]["state"].keys() == {"running"}


def test_free_ports_lie_below_the_ephemeral_range_and_are_free() -> None:
    low, _ = ephemeral_range()
    ports = {free_port(set()) for _ in range(20)}
    if low - PORT_FLOOR >= 1000:
        assert all(PORT_FLOOR <= port < low for port in ports), (low, ports)
    taken = set(ports)
    assert free_port(taken) not in taken


def test_a_container_the_kubelet_cannot_set_up_says_why_instead_of_waiting_forever(
    k8s_emulator: Emulator,
) -> None:
    core = client.CoreV1Api(k8s_emulator.api_client())
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"file": "text"},
    }
    core.create_namespaced_config_map("default", config)
    body = pod("nowhere")
    spec: dict[str, Any] = body["spec"]  # type: ignore[assignment]
    spec["volumes"] = [{"name": "cfg", "configMap": {"name": "cfg"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/cfg"}]
    spec["containers"][0]["workingDir"] = "/cfg/file/sub"  # below a file: cannot be made
    core.create_namespaced_pod("default", body)

    def waiting() -> dict[str, Any] | None:
        statuses = core.read_namespaced_pod("nowhere", "default").status.container_statuses
        state = statuses[0].state.waiting if statuses else None
        return state if state and state.reason == "RunContainerError" else None

    state = wait_for(waiting, what="RunContainerError")
    assert "NotADirectoryError" in state.message, state.message
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=nowhere")
    assert any(e.reason == "Failed" and "NotADirectoryError" in e.message for e in events.items)
    assert "main=waiting(RunContainerError)" in k8s_emulator.describe()


def test_a_failing_store_listener_drops_the_event_for_no_one(k8s_emulator: Emulator) -> None:
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    stop_broken = k8s_emulator.store.subscribe(broken)
    stop_seen = k8s_emulator.store.subscribe(
        lambda event: seen.append(event.obj["metadata"]["name"])
    )
    try:
        core = client.CoreV1Api(k8s_emulator.api_client())
        core.create_namespaced_pod("default", pod("heard"))  # the writer is not hurt
        wait_for(lambda: running(core, "heard"), what="the kubelet still runs the pod")
        assert "heard" in seen  # a listener after the broken one still got it
        text = k8s_emulator.describe()
        assert "store listener failed: ADDED " in text and "RuntimeError('listener bug')" in text
    finally:
        stop_broken()
        stop_seen()
