"""What goes wrong in pods: scheduling, image pulls, kills, restarts, suspension."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test.clusters import (
    GROUP,
    IMAGE,
    NS,
    SLEEP,
    VERSION,
    Cluster,
    error_body,
    pytorchjob,
    wait_for,
)

# --- faults in pods ----------------------------------------------------------------------------


def test_unschedulable_pod_stays_pending_with_event(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    k8s_emulator.make_unschedulable("gpu-worker-*")
    cluster.create(pytorchjob("gpu", ["python", "-c", "print('ok')"], workers=1))
    event = wait_for(lambda: cluster.events("gpu-worker-0"), what="FailedScheduling")[0]
    assert (event.type, event.reason, event.source.component) == (
        "Warning",
        "FailedScheduling",
        "default-scheduler",
    )
    assert event.message == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pod = cluster.pod("gpu-worker-0")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    scheduled = pod.status.conditions[0]
    assert (scheduled.type, scheduled.status, scheduled.reason) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    with pytest.raises(ApiException) as err:
        cluster.log("gpu-worker-0")
    assert error_body(err.value)["message"] == "pod gpu-worker-0 does not have a host assigned"
    k8s_emulator.clear_faults()
    wait_for(lambda: cluster.pod("gpu-worker-0").status.phase == "Succeeded", what="scheduled")


def test_image_pull_failure_reports_errimagepull_then_backoff(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    k8s_emulator.set_pullable_images(["pytorch/*", "python:*"])
    job = pytorchjob("img", ["python", "-c", "pass"])
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = (
        "registry.example.com/missing:1"
    )
    cluster.create(job)

    def reasons() -> set[str]:
        statuses = cluster.pod("img-master-0").status.container_statuses or []
        return {s.state.waiting.reason for s in statuses if s.state.waiting}

    seen: set[str] = set()
    wait_for(
        lambda: seen.update(reasons()) or {"ErrImagePull", "ImagePullBackOff"} <= seen,
        what="pull back-off",
    )
    messages = {(e.reason, e.message) for e in cluster.events("img-master-0")}
    assert ("Failed", "Error: ErrImagePull") in messages
    assert ("BackOff", 'Back-off pulling image "registry.example.com/missing:1"') in messages
    assert ("Failed", "Error: ImagePullBackOff") in messages
    assert cluster.pod("img-master-0").status.phase == "Pending"
    with pytest.raises(ApiException) as err:
        cluster.log("img-master-0")
    assert error_body(err.value)["message"].endswith(
        "is waiting to start: trying and failing to pull image"
    )
    assert cluster.state("img") == "Created"
    k8s_emulator.set_pullable_images(None)
    cluster.wait_state("img", "Succeeded")


def test_a_pull_delay_keeps_the_pod_creating_between_pulling_and_pulled(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    k8s_emulator.set_pull_delay({"pytorch/*": 2.5})  # long enough to see it creating
    cluster.create(pytorchjob("slow", ["python", "-c", "pass"], workers=1))
    wait_for(
        lambda: any(e.reason == "Pulling" for e in cluster.events("slow-master-0")), what="Pulling"
    )
    waiting = cluster.pod("slow-master-0").status.container_statuses[0].state.waiting
    assert waiting.reason == "ContainerCreating"
    cluster.wait_state("slow", "Succeeded")
    events = {e.reason: e for e in cluster.events("slow-master-0")}
    assert events["Scheduled"].message == "Successfully assigned default/slow-master-0 to " + (
        "emulator-node"
    )
    assert events["Pulling"].message == f'Pulling image "{IMAGE}"'
    assert events["Pulling"].involved_object.field_path == "spec.containers{pytorch}"
    pulled = events["Pulled"].message
    took = re.fullmatch(
        rf'Successfully pulled image "{re.escape(IMAGE)}" in ([0-9.]+)s '
        r"\(\1s including waiting\)\. Image size: 0 bytes\.",
        pulled,
    )
    assert took and 2.5 <= float(took.group(1)) < 60, pulled  # at least the delay
    assert [events[r].source.component for r in ("Pulled", "Created", "Started")] == ["kubelet"] * 3

    def worker_paths() -> set[tuple[str, str | None]]:
        return {(e.reason, e.involved_object.field_path) for e in cluster.events("slow-worker-0")}

    # the job succeeds with its master; the worker may still be in its own pull delay then
    wait_for(
        lambda: ("Started", "spec.containers{pytorch}") in worker_paths(),
        what="the worker's container Started",
    )
    paths = worker_paths()
    assert ("Started", "spec.initContainers{init-pytorch}") in paths, paths
    assert ("Started", "spec.containers{pytorch}") in paths, paths
    k8s_emulator.clear_faults()
    assert k8s_emulator.faults.pull_delay(IMAGE) == 0.0


def test_go_durations_read_as_the_kubelet_writes_them() -> None:
    from tests.k8s_emulator.container import go_duration

    assert [go_duration(s) for s in (0.0123, 1.2, 3.0, 61.5, 3725.25)] == [
        "12ms",
        "1.2s",
        "3s",
        "1m1.5s",
        "1h2m5.25s",
    ]


def test_killed_and_oomkilled_containers_restart_in_place(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    cluster.create(pytorchjob("kill", ["python", "-c", SLEEP]))
    wait_for(
        lambda: (
            cluster.log("kill-master-0")
            if cluster.pod("kill-master-0").status.phase == "Running"
            else None
        ),
        what="first run",
    )
    k8s_emulator.kill_pod("kill-master-0")

    def restarted() -> Any:
        status = cluster.pod("kill-master-0").status.container_statuses[0]
        return status if status.restart_count == 1 and status.state.running else None

    status = wait_for(restarted, what="restart")
    assert (status.last_state.terminated.exit_code, status.last_state.terminated.reason) == (
        137,
        "Error",
    )
    assert cluster.pod("kill-master-0").status.phase == "Running"
    assert "BackOff" in {e.reason for e in cluster.events("kill-master-0")}
    first = cluster.log("kill-master-0", previous=True)
    assert first.strip().isdigit()
    wait_for(lambda: cluster.log("kill-master-0"), what="second run's log")
    assert cluster.log("kill-master-0") != first
    assert cluster.state("kill") == "Running"  # in-place restarts are no job condition

    k8s_emulator.oom_kill("kill-master-0")
    status = wait_for(
        lambda: (
            (s := cluster.pod("kill-master-0").status.container_statuses[0]).restart_count == 2
            and s.state.running
            and s
        ),
        what="second restart",
    )
    assert (status.last_state.terminated.exit_code, status.last_state.terminated.reason) == (
        137,
        "OOMKilled",
    )

    limited = pytorchjob("limit", ["python", "-c", SLEEP], run_policy={"backoffLimit": 1})
    cluster.create(limited)
    wait_for(
        lambda: (
            cluster.log("limit-master-0")
            if cluster.pod("limit-master-0").status.phase == "Running"
            else None
        ),
        what="limit running",
    )
    k8s_emulator.kill_pod("limit-master-0")
    done = cluster.wait_state("limit", "Failed")
    failed = done["status"]["conditions"][-1]
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == (
        "Job limit has failed because it has reached the specified backoff limit"
    )
    assert done["status"]["completionTime"]


def test_never_policy_fails_the_job_with_the_operator_message(cluster: Cluster) -> None:
    cluster.create(
        pytorchjob("never", ["python", "-c", "import sys; sys.exit(3)"], restart="Never")
    )
    done = cluster.wait_state("never", "Failed")
    assert done["status"]["conditions"][-1]["message"] == (
        "PyTorchJob never is failed because 1 Master replica(s) failed."
    )
    assert done["status"]["replicaStatuses"]["Master"]["failed"] == 1
    pod = cluster.pod("never-master-0")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_suspend_and_resume(cluster: Cluster, k8s_emulator: Emulator) -> None:
    cluster.create(pytorchjob("sus", ["python", "-c", SLEEP]))
    wait_for(lambda: cluster.state("sus") == "Running", what="running")
    patch = {"spec": {"runPolicy": {"suspend": True}}}
    cluster.co.patch_namespaced_custom_object(GROUP, VERSION, NS, "pytorchjobs", "sus", patch)
    job = cluster.wait_state("sus", "Suspended")
    assert job["status"]["conditions"][-1]["message"] == "PyTorchJob sus is suspended."
    wait_for(lambda: not cluster.pods("sus") and not k8s_emulator.processes(), what="pods gone")
    patch = {"spec": {"runPolicy": {"suspend": False}}}
    cluster.co.patch_namespaced_custom_object(GROUP, VERSION, NS, "pytorchjobs", "sus", patch)
    cluster.wait_state("sus", "Running")
    suspended = next(
        c for c in cluster.job("sus")["status"]["conditions"] if c["type"] == "Suspended"
    )
    assert (suspended["status"], suspended["reason"]) == ("False", "PyTorchJobResumed")
