"""The Training Operator and the kubelet: a Kubeflow v1 job's pods, environment, volumes."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator.kubeflow import PYTHONUNBUFFERED
from tests.k8s_emulator.rewrite import Network, expand, path_rewriter
from tests.k8s_emulator_test.clusters import (
    NS,
    PRINT_ENV,
    Cluster,
    container,
    env_of,
    error_body,
    finished_pods,
    pytorchjob,
    replica,
    wait_for,
)

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
