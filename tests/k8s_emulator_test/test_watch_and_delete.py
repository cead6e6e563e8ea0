"""Watches, log follows, deletion and the pods' processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test.clusters import (
    GROUP,
    NS,
    SLEEP,
    VERSION,
    Cluster,
    alive,
    pytorchjob,
    wait_for,
)

# --- watch and logs ----------------------------------------------------------------------------


def test_watch_streams_added_and_modified_and_resumes(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    events: list[tuple[str, str | None]] = []
    stream = watch.Watch()
    list_jobs = cluster.co.list_namespaced_custom_object
    start = list_jobs(GROUP, VERSION, NS, "pytorchjobs")["metadata"]["resourceVersion"]
    cluster.create(pytorchjob("w", ["python", "-c", "print('hi')"]))
    for event in stream.stream(
        list_jobs, GROUP, VERSION, NS, "pytorchjobs", resource_version=start, timeout_seconds=15
    ):
        conditions = event["object"].get("status", {}).get("conditions", [])
        events.append((event["type"], conditions[-1]["type"] if conditions else None))
        if events[-1][1] == "Succeeded":
            stream.stop()
    assert events[0] == ("ADDED", None)
    assert all(kind == "MODIFIED" for kind, _ in events[1:])
    assert events[-1] == ("MODIFIED", "Succeeded")

    pods: list[tuple[str, str, str]] = []
    pod_watch = watch.Watch()
    selector = "training.kubeflow.org/replica-type=master"
    for event in pod_watch.stream(
        cluster.core.list_namespaced_pod, NS, label_selector=selector, timeout_seconds=1
    ):
        pods.append((event["type"], event["object"].metadata.name, event["object"].status.phase))
    assert pods == [("ADDED", "w-master-0", "Succeeded")]  # the current state first

    rv = cluster.job("w")["metadata"]["resourceVersion"]
    cluster.co.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "pytorchjobs", "w", {"metadata": {"labels": {"seen": "yes"}}}
    )
    resumed = [
        (e["type"], e["object"]["metadata"].get("labels"))
        for e in watch.Watch().stream(
            list_jobs, GROUP, VERSION, NS, "pytorchjobs", resource_version=rv, timeout_seconds=1
        )
    ]
    assert resumed == [("MODIFIED", {"seen": "yes"})]

    k8s_emulator.expire_watch_history()
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            list_jobs, GROUP, VERSION, NS, "pytorchjobs", resource_version=rv, timeout_seconds=1
        ):
            pass
    assert err.value.status == 410


def test_pod_log_follow_streams_lines_as_they_come(cluster: Cluster) -> None:
    script = (
        "import sys, time\nfor i in range(8):\n    print('line', i, flush=True)\n"
        "    print('err', i, file=sys.stderr, flush=True)\n    time.sleep(0.3)\n"
    )
    cluster.create(pytorchjob("logs", ["python", "-c", script]))
    wait_for(lambda: cluster.pod("logs-master-0").status.phase == "Running", what="running")
    arrivals: list[tuple[float, str]] = []
    for line in watch.Watch().stream(
        cluster.core.read_namespaced_pod_log, "logs-master-0", NS, follow=True
    ):
        arrivals.append((time.monotonic(), line))
    lines = [line for _, line in arrivals]
    assert lines == [f"{kind} {i}" for i in range(8) for kind in ("line", "err")]
    # streamed while running, not at the end (2.1 s of printing; the stream may open late)
    assert arrivals[-1][0] - arrivals[0][0] > 0.8
    # the stream ended with the container; the pod's status follows it (the kubelet writes
    # it to the API server after the container ended, as on a real node)
    wait_for(
        lambda: cluster.pod("logs-master-0").status.phase == "Succeeded",
        timeout=10,
        what="the pod Succeeded after its log stream ended",
    )
    assert cluster.log("logs-master-0", tail_lines=2) == "line 7\nerr 7\n"
    stamped = cluster.log("logs-master-0", timestamps=True).splitlines()[0]
    assert stamped.endswith("Z line 0") and stamped[4] == "-"
    with pytest.raises(ApiException) as err:
        cluster.log("logs-master-0", previous=True)
    assert err.value.status == 400


# --- deletion and processes --------------------------------------------------------------------


def test_delete_foreground_removes_dependents_and_kills_processes(cluster: Cluster) -> None:
    stubborn = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print(os.getpid(), child.pid, flush=True)\ntime.sleep(60)\n"
    )
    job = cluster.create(pytorchjob("del", ["python", "-c", stubborn], workers=1))
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "del",
        "uid": job["metadata"]["uid"],
    }
    cluster.core.create_namespaced_config_map(
        NS, {"metadata": {"name": "del-payload", "ownerReferences": [owner]}, "data": {"a": "b"}}
    )
    cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "unrelated"}})
    pids: list[int] = []
    for pod in ("del-master-0", "del-worker-0"):
        text = wait_for(
            lambda p=pod: (
                cluster.log(p)
                if cluster.pod(p).status.phase == "Running" and cluster.log(p)
                else None
            ),
            what=pod,
        )
        pids += [int(x) for x in text.split()]
    assert alive(pids) == pids
    body = cluster.co.delete_namespaced_custom_object(
        GROUP, VERSION, NS, "pytorchjobs", "del", propagation_policy="Foreground"
    )
    assert body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["finalizers"] == ["foregroundDeletion"]
    wait_for(lambda: cluster.gone(lambda: cluster.job("del")), what="job removal")
    assert cluster.pods("del") == []
    assert cluster.gone(lambda: cluster.core.read_namespaced_config_map("del-payload", NS))
    assert cluster.core.read_namespaced_config_map("unrelated", NS)
    assert cluster.core.list_namespaced_service(NS).items == []
    assert alive(pids) == []  # SIGTERM ignored: SIGKILL after the grace period, child included
    assert "Killing" in {e.reason for e in cluster.events("del-master-0")}


def test_delete_background_and_stop_leave_no_process() -> None:
    with Emulator() as emu, emu.api_client() as api:
        cluster = Cluster(api)
        cluster.create(pytorchjob("bg", ["python", "-c", SLEEP], workers=1))
        wait_for(lambda: len(emu.processes()) == 2, what="two processes")
        body = cluster.co.delete_namespaced_custom_object(GROUP, VERSION, NS, "pytorchjobs", "bg")
        assert body["kind"] == "Status" and body["status"] == "Success"
        assert body["details"]["name"] == "bg" and body["details"]["kind"] == "pytorchjobs"
        assert cluster.gone(lambda: cluster.job("bg"))  # gone at once; the GC follows
        wait_for(lambda: not cluster.pods("bg") and not emu.processes(), what="collection")

        cluster.create(pytorchjob("left", ["python", "-c", SLEEP], workers=1))
        procs = wait_for(lambda: emu.processes() if len(emu.processes()) == 2 else None)
        pids = [p.pid for p in procs]
    assert alive(pids) == []  # stopping the emulator killed them
    assert not emu.root.exists()


def test_stop_kills_the_pods_when_the_http_shutdown_is_late() -> None:
    # at 1,024 pods the server's loop can be too busy to close its streams within the wait
    with Emulator(http_stop_wait=0.5) as emu, emu.api_client() as api:
        Cluster(api).create(pytorchjob("late", ["python", "-c", SLEEP], workers=1))
        procs = wait_for(lambda: emu.processes() if len(emu.processes()) == 2 else None)
        pids = [p.pid for p in procs]
        loop = emu._loop
        assert loop is not None
        loop.call_soon_threadsafe(time.sleep, 3)  # busy past the wait
    assert emu.http_stop_late
    assert alive(pids) == []  # stopped all the same
    assert not emu.root.exists()


KILLED_RUNNER = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from tests.k8s_emulator import Emulator
from tests.k8s_emulator.resources import PODS
emu = Emulator().start()
command = ["python", "-c", sys.argv[2]]
pod = {"metadata": {"name": "p"}, "spec": {"containers": [
    {"name": "c", "image": "x", "command": command}]}}
emu.api.create(PODS, "default", pod)
while len(emu.processes()) < 2:
    time.sleep(0.05)
print(emu.root, *[p.pid for p in emu.processes()], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_pod_processes_die_with_the_emulator_process_even_on_sigkill() -> None:
    child = "import subprocess, time; subprocess.Popen(['sleep', '60'], start_new_session=True); "
    child += "time.sleep(60)"
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", KILLED_RUNNER, repo, child],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    root, *pids = done.stdout.split()
    assert len(pids) == 2
    wait_for(lambda: not alive([int(p) for p in pids]), what="the watchdog's kill")
    wait_for(lambda: not Path(root).exists(), what="the root's removal")
