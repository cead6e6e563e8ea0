"""The Kubernetes API emulator, driven by the real ``kubernetes`` client and by ``kubectl``."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator.kubeflow import PYTHONUNBUFFERED
from tests.k8s_emulator.rewrite import Network, expand, path_rewriter

Obj = dict[str, Any]
T = TypeVar("T")
GROUP, VERSION, NS = "kubeflow.org", "v1", "default"
IMAGE = "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"
ENV_KEYS = (
    "MASTER_ADDR MASTER_PORT WORLD_SIZE RANK PET_NNODES PET_NODE_RANK PET_NPROC_PER_NODE "
    "PET_MASTER_ADDR PET_MASTER_PORT PYTHONUNBUFFERED PET_RDZV_ENDPOINT PET_RDZV_BACKEND "
    "TF_CONFIG HOSTNAME"
).split()
PRINT_ENV = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS}}}))"
SLEEP = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"


# --- helpers -----------------------------------------------------------------------------------


def wait_for(check: Callable[[], T | None], timeout: float = 15.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ApiException as exc:  # not created yet
            if exc.status != 404:
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def container(command: list[str], name: str = "pytorch", **extra: Any) -> Obj:
    return {"name": name, "image": IMAGE, "command": command, **extra}


def replica(command: list[str], replicas: int = 1, restart: str = "OnFailure", **extra: Any) -> Obj:
    spec = {"containers": [container(command, **extra)]}
    return {"replicas": replicas, "restartPolicy": restart, "template": {"spec": spec}}


def pytorchjob(
    name: str,
    command: list[str],
    *,
    workers: int = 0,
    restart: str = "OnFailure",
    run_policy: Obj | None = None,
    **extra: Any,
) -> Obj:
    replicas = {"Master": replica(command, restart=restart)}
    if workers:
        replicas["Worker"] = replica(command, workers, restart=restart)
    spec: Obj = {"pytorchReplicaSpecs": replicas, **extra}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": spec,
    }


class Cluster:
    """The client APIs for one emulator."""

    def __init__(self, api_client: Any) -> None:
        self.co = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def create(self, job: Obj, plural: str = "pytorchjobs") -> Obj:
        return dict(self.co.create_namespaced_custom_object(GROUP, VERSION, NS, plural, job))

    def job(self, name: str, plural: str = "pytorchjobs") -> Obj:
        return dict(self.co.get_namespaced_custom_object(GROUP, VERSION, NS, plural, name))

    def state(self, name: str, plural: str = "pytorchjobs") -> str | None:
        conditions = self.job(name, plural).get("status", {}).get("conditions", [])
        return conditions[-1]["type"] if conditions else None

    def wait_state(
        self, name: str, state: str, plural: str = "pytorchjobs", timeout: float = 20
    ) -> Obj:
        wait_for(lambda: self.state(name, plural) == state, timeout, f"{name} to be {state}")
        return self.job(name, plural)

    def pods(self, job: str) -> list[Any]:
        selector = f"training.kubeflow.org/job-name={job}"
        return list(self.core.list_namespaced_pod(NS, label_selector=selector).items)

    def pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, NS)

    def log(self, name: str, **kwargs: Any) -> str:
        """The log text as sent (the client would turn a JSON-looking log into a dict's repr)."""
        response = self.core.read_namespaced_pod_log(name, NS, _preload_content=False, **kwargs)
        return str(response.data.decode())

    def events(self, name: str) -> list[Any]:
        selector = f"involvedObject.name={name}"
        return list(self.core.list_namespaced_event(NS, field_selector=selector).items)

    def gone(self, read: Callable[[], Any]) -> bool:
        try:
            read()
        except ApiException as exc:
            return exc.status == 404
        return False


@pytest.fixture
def cluster(k8s_api_client: Any) -> Cluster:
    return Cluster(k8s_api_client)


def finished_pods(cluster: Cluster, job: str, count: int) -> dict[str, Any] | None:
    """The job's pods by name, once ``count`` of them have succeeded."""
    pods = {p.metadata.name: p for p in cluster.pods(job) if p.status.phase == "Succeeded"}
    return pods if len(pods) == count else None


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def error_body(exc: ApiException) -> Obj:
    return dict(json.loads(exc.body))


# --- the operator and the kubelet --------------------------------------------------------------


def test_pytorchjob_runs_pods_with_operator_env_and_succeeds(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    cluster.create(pytorchjob("train", ["python", "-c", PRINT_ENV], workers=2))
    job = cluster.wait_state("train", "Succeeded")
    status = job["status"]
    assert [c["type"] for c in status["conditions"]] == ["Created", "Running", "Succeeded"]
    created, running, succeeded = status["conditions"]
    assert created["reason"] == "PyTorchJobCreated"
    assert created["message"] == "PyTorchJob train is created."
    assert (running["status"], running["reason"]) == ("False", "PyTorchJobRunning")
    assert succeeded["reason"] == "PyTorchJobSucceeded"
    assert succeeded["message"] == "PyTorchJob train is successfully completed."
    for cond in status["conditions"]:
        assert cond["lastUpdateTime"] and cond["lastTransitionTime"]
    assert status["startTime"] and status["completionTime"]
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1
    assert status["replicaStatuses"]["Master"]["selector"] == (
        "training.kubeflow.org/job-name=train,training.kubeflow.org/operator-name="
        "pytorchjob-controller,training.kubeflow.org/replica-type=master"
    )

    pods = wait_for(lambda: finished_pods(cluster, "train", 3), what="three finished pods")
    assert sorted(pods) == ["train-master-0", "train-worker-0", "train-worker-1"]
    master = pods["train-master-0"]
    assert master.metadata.labels == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "train",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    assert "training.kubeflow.org/job-role" not in pods["train-worker-0"].metadata.labels
    owner = master.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller, owner.block_owner_deletion) == (
        "PyTorchJob",
        "train",
        True,
        True,
    )
    assert [c.name for c in pods["train-worker-1"].spec.init_containers] == ["init-pytorch"]
    assert master.spec.init_containers is None
    assert master.spec.restart_policy == "OnFailure"
    assert master.spec.containers[0].ports[0].name == "pytorchjob-port"

    seen_ports = set()
    for name, rank in (("train-master-0", 0), ("train-worker-0", 1), ("train-worker-1", 2)):
        pod = pods[name]
        assert pod.status.phase == "Succeeded"
        state = pod.status.container_statuses[0].state.terminated
        assert (state.exit_code, state.reason) == (0, "Completed")
        declared = env_of(pod)
        assert declared == {
            "PYTHONUNBUFFERED": PYTHONUNBUFFERED,
            "MASTER_PORT": "23456",
            "PET_MASTER_PORT": "23456",
            "MASTER_ADDR": "train-master-0",
            "PET_MASTER_ADDR": "train-master-0",
            "WORLD_SIZE": "3",
            "RANK": str(rank),
            "PET_NPROC_PER_NODE": "auto",
            "PET_NODE_RANK": str(rank),
            "PET_NNODES": "3",
        }
        seen = json.loads(cluster.log(name))
        assert seen["RANK"] == seen["PET_NODE_RANK"] == str(rank)
        if k8s_emulator.network_mode == "pods":  # the manifest's values, as on a cluster
            assert {key: seen[key] for key in declared} == declared
            assert pod.status.pod_ip.startswith("10.244.")
        else:  # pods share this host's loopback: the emulator moved the master
            assert seen["MASTER_ADDR"] == seen["PET_MASTER_ADDR"] == "127.0.0.1"
            assert seen["MASTER_PORT"] == seen["PET_MASTER_PORT"] != "23456"
        assert seen["HOSTNAME"] == name
        seen_ports.add(seen["MASTER_PORT"])
    assert len(seen_ports) == 1  # every pod reaches the one master port
    services = cluster.core.list_namespaced_service(NS).items
    assert sorted(s.metadata.name for s in services) == sorted(pods)
    assert all(s.spec.cluster_ip == "None" for s in services)
    job_events = cluster.events("train")
    assert {"SuccessfulCreatePod", "SuccessfulCreateService"} <= {e.reason for e in job_events}
    assert all(e.source.component == "pytorchjob-controller" for e in job_events)
    pod_events = [e.reason for e in cluster.events("train-master-0")]
    assert pod_events[:1] == ["Scheduled"] and {"Pulled", "Created", "Started"} <= set(pod_events)


def test_tfjob_gets_tf_config_on_the_tensorflow_container(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    command = ["python", "-c", PRINT_ENV]
    chief = replica(command, restart="Never", name="tensorflow")
    chief["template"]["spec"]["containers"].append(
        container(["python", "-c", PRINT_ENV], name="sidecar")
    )
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf"},
        "spec": {
            "tfReplicaSpecs": {
                "Chief": chief,
                "Worker": replica(command, 2, restart="Never", name="tensorflow"),
            },
            # (TFJob's default, Running, would delete workers still running at the end)
            "runPolicy": {"cleanPodPolicy": "None"},
        },
    }
    cluster.create(job, "tfjobs")
    done = cluster.wait_state("tf", "Succeeded", "tfjobs")
    assert done["status"]["conditions"][-1]["message"] == "TFJob default/tf successfully completed."
    pods = wait_for(lambda: finished_pods(cluster, "tf", 3), what="three finished pods")
    assert sorted(pods) == ["tf-chief-0", "tf-worker-0", "tf-worker-1"]
    config = json.loads(env_of(pods["tf-worker-1"])["TF_CONFIG"])
    assert config == {
        "cluster": {
            "chief": ["tf-chief-0.default.svc:2222"],
            "worker": ["tf-worker-0.default.svc:2222", "tf-worker-1.default.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    sidecar = pods["tf-chief-0"].spec.containers[1]
    assert not any(e.name == "TF_CONFIG" for e in sidecar.env or [])
    assert pods["tf-chief-0"].metadata.labels["training.kubeflow.org/job-role"] == "master"
    seen = json.loads(cluster.log("tf-worker-1", container="tensorflow"))["TF_CONFIG"]
    local = json.loads(seen)["cluster"]
    addresses = local["chief"] + local["worker"]
    if k8s_emulator.network_mode == "pods":  # as written: each task on its own address
        assert local == config["cluster"]
    else:
        assert all(a.startswith("127.0.0.1:") for a in addresses)
        assert len(set(addresses)) == 3  # one port per task: they all share one host
    chief_view = json.loads(
        json.loads(cluster.log("tf-chief-0", container="tensorflow"))["TF_CONFIG"]
    )
    assert chief_view["cluster"] == local and chief_view["task"] == {"type": "chief", "index": 0}


def test_elastic_job_env_and_worker_only_success(cluster: Cluster, k8s_emulator: Emulator) -> None:
    command = ["python", "-c", PRINT_ENV]
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "el"},
        "spec": {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": 1,
                "maxReplicas": 3,
                "maxRestarts": 2,
                "rdzvId": "el",
            },
            "nprocPerNode": "2",
            "pytorchReplicaSpecs": {"Worker": replica(command, 2)},
        },
    }
    cluster.create(job)
    done = cluster.wait_state("el", "Succeeded")
    assert (
        done["status"]["conditions"][-1]["message"]
        == "PyTorchJob default/el successfully completed."
    )
    pods = {p.metadata.name: p for p in cluster.pods("el")}
    assert pods["el-worker-0"].metadata.labels["training.kubeflow.org/job-role"] == "master"
    env = env_of(pods["el-worker-1"])
    assert env == {
        "PYTHONUNBUFFERED": PYTHONUNBUFFERED,
        "PET_RDZV_ENDPOINT": "el-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "1:3",
        "PET_MAX_RESTARTS": "2",
        "PET_RDZV_ID": "el",
    }
    # The elastic job succeeds with its first worker: the other may still be starting.
    wait_for(lambda: cluster.pod("el-worker-1").status.phase == "Succeeded", what="worker 1 done")
    seen = json.loads(cluster.log("el-worker-1"))
    host, port = seen["PET_RDZV_ENDPOINT"].split(":")
    if k8s_emulator.network_mode == "pods":
        assert (host, port) == ("el-worker-0", "23456")
    else:
        assert host == "127.0.0.1" and port != "23456"
    assert seen["MASTER_ADDR"] is None and seen["RANK"] is None


def test_volumes_env_sources_and_path_rewriting(cluster: Cluster, k8s_emulator: Emulator) -> None:
    blob = bytes(range(256))
    cluster.core.create_namespaced_config_map(
        NS,
        {
            "metadata": {"name": "cfg"},
            "data": {"greeting": "hello"},
            "binaryData": {"blob.bin": base64.b64encode(blob).decode()},
        },
    )
    cluster.core.create_namespaced_secret(
        NS, {"metadata": {"name": "sec"}, "data": {"token": base64.b64encode(b"s3cret").decode()}}
    )
    script = (
        "import os, sys, pathlib\n"
        "greet = pathlib.Path(sys.argv[1]).read_text()\n"
        "blob = pathlib.Path('/opt/cfg/blob.bin').read_bytes()\n"
        "token = pathlib.Path(os.environ['TOKEN_FILE']).read_text()\n"
        "pathlib.Path('out.txt').write_text(greet + ' from ' + os.environ['POD'])\n"
        "env = os.environ\n"
        "print(greet, len(blob), blob == bytes(range(256)), token, env['MSG'], env['GREETING'],\n"
        "      env['SECRET'], os.path.isdir(env['SCRATCH']), os.getcwd() == env['DATA'], sep='|')\n"
    )
    writer = {
        "metadata": {"name": "writer"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [
                {
                    "name": "cfg",
                    "configMap": {
                        "name": "cfg",
                        "items": [
                            {"key": "greeting", "path": "sub/greet.txt"},
                            {"key": "blob.bin", "path": "blob.bin"},
                        ],
                    },
                },
                {"name": "sec", "secret": {"secretName": "sec"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
            ],
            "containers": [
                container(
                    ["python", "-c", script, "/opt/cfg/sub/greet.txt"],
                    name="main",
                    workingDir="/opt/data",
                    volumeMounts=[
                        {"name": "cfg", "mountPath": "/opt/cfg", "readOnly": True},
                        {"name": "sec", "mountPath": "/etc/sec"},
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "data", "mountPath": "/opt/data"},
                    ],
                    env=[
                        {"name": "TOKEN_FILE", "value": "/etc/sec/token"},
                        {"name": "SCRATCH", "value": "/scratch"},
                        {"name": "DATA", "value": "/opt/data"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {
                            "name": "GREETING",
                            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}},
                        },
                        {
                            "name": "SECRET",
                            "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}},
                        },
                        {"name": "MSG", "value": "$(POD) says $(GREETING) $$(POD) $(NOPE)"},
                    ],
                )
            ],
        },
    }
    cluster.core.create_namespaced_pod(NS, writer)
    wait_for(lambda: cluster.pod("writer").status.phase == "Succeeded", what="writer")
    fields = cluster.log("writer").strip().split("|")
    assert fields == [
        "hello",
        "256",
        "True",
        "s3cret",
        "writer says hello $(POD) $(NOPE)",
        "hello",
        "s3cret",
        "True",
        "True",
    ]
    reader = {
        "metadata": {"name": "reader"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}],
            "containers": [
                container(
                    ["cat", "/mnt/shared/out.txt"],
                    name="main",
                    volumeMounts=[{"name": "d", "mountPath": "/mnt/shared"}],
                )
            ],
        },
    }
    cluster.core.create_namespaced_pod(NS, reader)
    wait_for(lambda: cluster.pod("reader").status.phase == "Succeeded", what="reader")
    assert cluster.log("reader") == "hello from writer"


def test_missing_configmap_keeps_pod_creating_until_it_exists(cluster: Cluster) -> None:
    pod = {
        "metadata": {"name": "waits"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "p", "configMap": {"name": "late"}}],
            "containers": [
                container(
                    ["cat", "/p/x"], name="main", volumeMounts=[{"name": "p", "mountPath": "/p"}]
                )
            ],
        },
    }
    cluster.core.create_namespaced_pod(NS, pod)
    event = wait_for(lambda: [e for e in cluster.events("waits") if e.reason == "FailedMount"])[0]
    assert event.type == "Warning"
    assert event.message == 'MountVolume.SetUp failed for volume "p" : configmap "late" not found'
    status = cluster.pod("waits").status
    assert status.phase == "Pending"
    assert status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    with pytest.raises(ApiException) as err:
        cluster.log("waits")
    assert err.value.status == 400
    assert error_body(err.value)["message"] == (
        'container "main" in pod "waits" is waiting to start: ContainerCreating'
    )
    cluster.core.create_namespaced_config_map(
        NS, {"metadata": {"name": "late"}, "data": {"x": "arrived"}}
    )
    wait_for(lambda: cluster.pod("waits").status.phase == "Succeeded", what="waits")
    assert cluster.log("waits") == "arrived"


def test_rewriting_rules() -> None:
    network = Network(lambda ns: {"job-master-0", "job-worker-0"} if ns == "default" else set())
    port = network.local_port("default", "job-master-0", 23456)
    assert port != 23456 and network.local_port("default", "job-master-0", 23456) == port
    env = {
        "MASTER_ADDR": "job-master-0",
        "MASTER_PORT": "23456",
        "OTHER_PORT": "23456",  # no partner naming a Service: left alone
        "URL": "http://job-worker-0.default.svc.cluster.local:80/x",
        "PATHLIKE": "/tmp/job-master-0/file",
        "ANY_SVC": "db.other.svc:5432",
        "NOT_A_SERVICE": "job-master-01",
    }
    local = network.rewrite_env("default", env)
    worker_port = network.local_port("default", "job-worker-0", 80)
    assert local == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OTHER_PORT": "23456",
        "URL": f"http://127.0.0.1:{worker_port}/x",
        "PATHLIKE": "/tmp/job-master-0/file",
        "ANY_SVC": "127.0.0.1:5432",
        "NOT_A_SERVICE": "job-master-01",
    }
    paths = path_rewriter([("/opt/data", "/local/d"), ("/opt/data/sub", "/local/s")])
    assert paths("/opt/data/x /opt/data/sub/y /opt/database /x/opt/data") == (
        "/local/d/x /local/s/y /opt/database /x/opt/data"
    )
    assert expand("$(A)-$$(A)-$(B)", {"A": "1"}) == "1-$(A)-$(B)"


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
        "import sys, time\nfor i in range(4):\n    print('line', i, flush=True)\n"
        "    print('err', i, file=sys.stderr, flush=True)\n    time.sleep(0.4)\n"
    )
    cluster.create(pytorchjob("logs", ["python", "-c", script]))
    wait_for(lambda: cluster.pod("logs-master-0").status.phase == "Running", what="running")
    arrivals: list[tuple[float, str]] = []
    for line in watch.Watch().stream(
        cluster.core.read_namespaced_pod_log, "logs-master-0", NS, follow=True
    ):
        arrivals.append((time.monotonic(), line))
    lines = [line for _, line in arrivals]
    assert lines == [f"{kind} {i}" for i in range(4) for kind in ("line", "err")]
    assert arrivals[-1][0] - arrivals[0][0] > 0.8  # streamed while running, not at the end
    # the stream ended with the container; the pod's status follows it (the kubelet writes
    # it to the API server after the container ended, as on a real node)
    wait_for(lambda: cluster.pod("logs-master-0").status.phase == "Succeeded", timeout=10,
             what="the pod Succeeded after its log stream ended")  # fmt: skip
    assert cluster.log("logs-master-0", tail_lines=2) == "line 3\nerr 3\n"
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


# --- API errors --------------------------------------------------------------------------------


def test_conflict_invalid_and_pruned_fields(cluster: Cluster, k8s_emulator: Emulator) -> None:
    cluster.create(pytorchjob("dup", ["python", "-c", "pass"]))
    with pytest.raises(ApiException) as err:
        cluster.create(pytorchjob("dup", ["python", "-c", "pass"]))
    body = error_body(err.value)
    assert err.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'pytorchjobs.kubeflow.org "dup" already exists'
    assert body["details"] == {"name": "dup", "group": "kubeflow.org", "kind": "pytorchjobs"}

    bad = pytorchjob("bad", ["python", "-c", "pass"])
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    del bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ApiException) as err:
        cluster.create(bad)
    body = error_body(err.value)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    causes = {c["field"]: c for c in body["details"]["causes"]}
    replicas = causes["spec.pytorchReplicaSpecs.Master.replicas"]
    assert replicas["reason"] == "FieldValueTypeInvalid"
    assert "must be of type integer" in replicas["message"]
    name = causes["spec.pytorchReplicaSpecs.Master.template.spec.containers[0].name"]
    assert name == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].name",
    }
    assert body["message"].startswith('PyTorchJob.kubeflow.org "bad" is invalid: [')

    with pytest.raises(ApiException) as err:
        cluster.create(pytorchjob("Bad_Name", ["python", "-c", "pass"]))
    assert err.value.status == 422
    assert error_body(err.value)["details"]["causes"][0]["field"] == "metadata.name"

    extra = pytorchjob("extra", ["python", "-c", "pass"], sparkles=True)
    data, code, headers = cluster.co.create_namespaced_custom_object_with_http_info(
        GROUP, VERSION, NS, "pytorchjobs", extra
    )
    assert code == 201 and "sparkles" not in data["spec"]
    assert headers["Warning"] == '299 - "unknown field \\"spec.sparkles\\""'
    with pytest.raises(ApiException) as err:
        cluster.co.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            "pytorchjobs",
            pytorchjob("extra2", ["true"], sparkles=1),
            field_validation="Strict",
        )
    assert err.value.status == 400
    assert 'unknown field "spec.sparkles"' in error_body(err.value)["message"]

    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map(
            NS, {"metadata": {"name": "big"}, "data": {"x": "a" * (1024 * 1024)}}
        )
    assert err.value.status == 422
    assert "must have at most 1048576 bytes" in error_body(err.value)["message"]
    with pytest.raises(ApiException) as err:
        cluster.job("nope")
    assert err.value.status == 404
    assert error_body(err.value)["message"] == 'pytorchjobs.kubeflow.org "nope" not found'


def test_forbidden_unauthorized_and_token(cluster: Cluster, k8s_emulator: Emulator) -> None:
    k8s_emulator.deny(1, verbs=["create"], resources=["pytorchjobs"])
    with pytest.raises(ApiException) as err:
        cluster.create(pytorchjob("rbac", ["python", "-c", "pass"]))
    body = error_body(err.value)
    assert err.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:default:default" '
        'cannot create resource "pytorchjobs" in API group "kubeflow.org" in the namespace '
        '"default"'
    )
    cluster.create(pytorchjob("rbac", ["python", "-c", "pass"]))  # only the next one
    k8s_emulator.deny(resources=["pods/log"], user="alice")
    with pytest.raises(ApiException) as err:
        cluster.log("rbac-master-0")
    assert error_body(err.value)["message"].startswith(
        'pods "rbac-master-0" is forbidden: User "alice" cannot get resource "pods/log"'
    )
    assert cluster.job("rbac")  # other requests pass
    k8s_emulator.clear_faults()

    k8s_emulator.unauthorized(2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            cluster.job("rbac")
        assert err.value.status == 401 and error_body(err.value)["reason"] == "Unauthorized"
    assert cluster.job("rbac")

    k8s_emulator.token = "s3cret"
    with pytest.raises(ApiException) as err:
        cluster.job("rbac")
    assert err.value.status == 401
    with k8s_emulator.api_client() as authorised:
        assert Cluster(authorised).job("rbac")


def test_missing_crds_answer_404_everywhere(cluster: Cluster, k8s_emulator: Emulator) -> None:
    apis = client.ApisApi(cluster.co.api_client)
    crds = client.ApiextensionsV1Api(cluster.co.api_client)
    assert [g.name for g in apis.get_api_versions().groups] == [
        "apiextensions.k8s.io",
        "kubeflow.org",
    ]
    crd = crds.read_custom_resource_definition("pytorchjobs.kubeflow.org")
    assert crd.spec.names.kind == "PyTorchJob"
    assert crd.status.conditions[-1].type == "Established"
    k8s_emulator.remove_crds()
    assert [g.name for g in apis.get_api_versions().groups] == ["apiextensions.k8s.io"]
    with pytest.raises(ApiException) as err:
        crds.read_custom_resource_definition("pytorchjobs.kubeflow.org")
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(cluster.co.api_client).get_api_resources(GROUP, VERSION)
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        cluster.create(pytorchjob("x", ["python", "-c", "pass"]))
    assert err.value.status == 404
    assert error_body(err.value)["message"] == "the server could not find the requested resource"
    k8s_emulator.restore_crds()
    assert cluster.create(pytorchjob("x", ["python", "-c", "pass"]))


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
    k8s_emulator.set_pull_delay({"pytorch/*": 1.2})
    cluster.create(pytorchjob("slow", ["python", "-c", "pass"], workers=1))
    wait_for(lambda: any(e.reason == "Pulling" for e in cluster.events("slow-master-0")),
             what="Pulling")  # fmt: skip
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
    assert pulled.startswith(f'Successfully pulled image "{IMAGE}" in 1.2'), pulled
    assert pulled.endswith("s including waiting). Image size: 0 bytes."), pulled
    assert [events[r].source.component for r in ("Pulled", "Created", "Started")] == ["kubelet"] * 3

    def worker_paths() -> set[tuple[str, str | None]]:
        return {(e.reason, e.involved_object.field_path) for e in cluster.events("slow-worker-0")}

    # the job succeeds with its master; the worker may still be in its own pull delay then
    wait_for(lambda: ("Started", "spec.containers{pytorch}") in worker_paths(),
             what="the worker's container Started")  # fmt: skip
    paths = worker_paths()
    assert ("Started", "spec.initContainers{init-pytorch}") in paths, paths
    assert ("Started", "spec.containers{pytorch}") in paths, paths
    k8s_emulator.clear_faults()
    assert k8s_emulator.faults.pull_delay(IMAGE) == 0.0


def test_go_durations_read_as_the_kubelet_writes_them() -> None:
    from tests.k8s_emulator.container import go_duration

    assert [go_duration(s) for s in (0.0123, 1.2, 3.0, 61.5, 3725.25)] == [
        "12ms", "1.2s", "3s", "1m1.5s", "1h2m5.25s"
    ]  # fmt: skip


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


# --- kubectl and accounting --------------------------------------------------------------------


def kubectl(
    kubeconfig: Path, *args: str, cache: str = "kube-cache"
) -> subprocess.CompletedProcess[str]:
    command = [
        "kubectl",
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={kubeconfig.parent / cache}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_and_logs(
    cluster: Cluster, k8s_emulator: Emulator, k8s_kubeconfig: Path
) -> None:
    cluster.create(pytorchjob("kc", ["python", "-c", "print('hello from kubectl')"], workers=1))
    cluster.wait_state("kc", "Succeeded")
    got = kubectl(k8s_kubeconfig, "get", "pytorchjobs")
    assert got.returncode == 0, got.stderr
    header, row = got.stdout.splitlines()
    assert header.split() == ["NAME", "STATE", "AGE"]
    assert row.split()[:2] == ["kc", "Succeeded"]
    pods = kubectl(k8s_kubeconfig, "get", "pods", "-l", "training.kubeflow.org/job-name=kc")
    assert pods.returncode == 0, pods.stderr
    assert [line.split()[:3] for line in pods.stdout.splitlines()[1:]] == [
        ["kc-master-0", "0/1", "Completed"],
        ["kc-worker-0", "0/1", "Completed"],
    ]
    logs = kubectl(k8s_kubeconfig, "logs", "kc-worker-0")
    assert (logs.returncode, logs.stdout) == (0, "hello from kubectl\n")
    as_json = kubectl(k8s_kubeconfig, "get", "pytorchjob", "kc", "-o", "json")
    assert json.loads(as_json.stdout)["status"]["conditions"][-1]["type"] == "Succeeded"
    config.load_kube_config(config_file=str(k8s_kubeconfig))
    assert client.CoreV1Api().read_namespaced_pod("kc-master-0", NS).status.phase == "Succeeded"

    k8s_emulator.remove_crds()
    missing = kubectl(k8s_kubeconfig, "get", "pytorchjobs", cache="fresh-cache")
    assert missing.returncode != 0
    assert 'the server doesn\'t have a resource type "pytorchjobs"' in missing.stderr
    k8s_emulator.restore_crds()
    k8s_emulator.unauthorized()
    denied = kubectl(k8s_kubeconfig, "get", "pods")
    assert denied.returncode != 0 and "Unauthorized" in denied.stderr


def test_stats_count_requests_and_concurrent_streams(
    cluster: Cluster, k8s_emulator: Emulator
) -> None:
    cluster.create(pytorchjob("st", ["python", "-c", SLEEP]))
    wait_for(
        lambda: (
            cluster.log("st-master-0")
            if cluster.pod("st-master-0").status.phase == "Running"
            else None
        ),
        what="running",
    )
    k8s_emulator.reset_stats()
    for _ in range(3):
        cluster.core.list_namespaced_pod(NS)
    stop = threading.Event()

    def follow() -> None:
        response = cluster.core.read_namespaced_pod_log(
            "st-master-0", NS, follow=True, _preload_content=False
        )
        stop.wait(10)
        response.close()

    def watch_pods() -> None:
        for _ in watch.Watch().stream(cluster.core.list_namespaced_pod, NS, timeout_seconds=1):
            pass

    threads = [threading.Thread(target=follow), threading.Thread(target=watch_pods)]
    for thread in threads:
        thread.start()
    wait_for(lambda: k8s_emulator.stats().streams.current == 2, what="two open streams")
    stats = k8s_emulator.stats()
    assert stats.watches.current == stats.log_follows.current == 1
    stop.set()
    for thread in threads:
        thread.join()
    wait_for(lambda: k8s_emulator.stats().streams.current == 0, what="streams closed")
    stats = k8s_emulator.stats()
    assert stats.requests[("list", "pods")] == 3
    assert stats.requests[("watch", "pods")] >= 1
    assert stats.requests[("get", "pods/log")] == 1
    assert stats.streams.peak == 2 and stats.streams.opened >= 2
    assert (
        stats.count(resource="pods")
        == stats.requests[("list", "pods")] + stats.requests[("watch", "pods")]
    )
    assert stats.connections.peak >= 2
    assert stats.total == sum(stats.requests.values())


# --- real torchrun -----------------------------------------------------------------------------

ALL_REDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchrun_gloo_all_reduce_across_two_pods(cluster: Cluster) -> None:
    pytest.importorskip("torch")
    cluster.core.create_namespaced_config_map(
        NS, {"metadata": {"name": "train"}, "data": {"allreduce.py": ALL_REDUCE}}
    )
    command = ["torchrun", "/opt/train/allreduce.py"]
    job = pytorchjob("ddp", command, workers=1, nprocPerNode="1")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["volumes"] = [{"name": "train", "configMap": {"name": "train"}}]
        pod["containers"][0]["volumeMounts"] = [{"name": "train", "mountPath": "/opt/train"}]
        pod["containers"][0]["env"] = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    cluster.create(job)
    cluster.wait_state("ddp", "Succeeded", timeout=120)
    # (torchrun may add warnings, e.g. when the rendezvous store host exits first)
    assert "rank 0/2 sum 3" in cluster.log("ddp-master-0").splitlines()
    assert "rank 1/2 sum 3" in cluster.log("ddp-worker-0").splitlines()


def test_process_environment_is_the_pods_not_the_test_runners(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8S_EMULATOR_TEST_LEAK", "1")
    check = "import os; print('K8S_EMULATOR_TEST_LEAK' in os.environ, os.environ['HOME'])"
    cluster.create(pytorchjob("env", ["python", "-c", check]))
    cluster.wait_state("env", "Succeeded")
    leaked, home = cluster.log("env-master-0").split()
    assert leaked == "False" and home != os.environ["HOME"]
