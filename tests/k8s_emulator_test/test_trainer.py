"""The emulator playing Kubeflow Trainer v2 (TrainJob -> JobSet -> Jobs -> pods): a TrainJob
runs, runtimes and their patches, the webhooks; driven over HTTP by the real ``kubernetes``
client."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test.trainjobs import (
    JOBSET,
    NS,
    PRINT_ENV,
    TRAINER,
    V1ALPHA2,
    Cluster,
    Obj,
    body,
    cluster,
    env_of,
    runtime,
    trainer,
    trainjob,
    wait_for,
)

__all__ = ["cluster", "trainer"]  # the fixtures this module uses


# --- a TrainJob runs ----------------------------------------------------------------------------


def test_two_node_trainjob_completes_with_jobset_pods_and_torch_env(
    cluster: Cluster, trainer: Emulator
) -> None:
    created = cluster.create(
        trainjob(
            "tj",
            ["python", "-c", PRINT_ENV],
            trainer={"numNodes": 2, "env": [{"name": "EXTRA", "value": "x"}]},
        )
    )
    assert created["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": TRAINER,
        "kind": "ClusterTrainingRuntime",
    }
    assert created["spec"]["suspend"] is False
    assert created["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    complete = cluster.ended("tj")
    assert (complete["reason"], complete["message"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    status = cluster.trainjob("tj")["status"]
    assert status["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    assert [c["type"] for c in status["conditions"]] == ["Complete"]

    # The JobSet: owned by the TrainJob, the runtime's template with the trainer step filled in.
    jobset = cluster.jobset("tj")
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    rjob = jobset["spec"]["replicatedJobs"][0]
    assert (rjob["name"], rjob["replicas"]) == ("node", 1)
    job_spec = rjob["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"]) == (2, 2)
    assert job_spec["completionMode"] == "Indexed"
    node = job_spec["template"]["spec"]["containers"][0]
    assert node["ports"] == [{"containerPort": 29500}]
    assert env_of(node) == {
        "EXTRA": "x",
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
        "PET_MASTER_ADDR": "tj-node-0-0.tj",
        "PET_MASTER_PORT": "29500",
    }
    assert jobset["status"]["terminalState"] == "Completed"

    # One Indexed Job, with the trainer step's label.
    (job,) = cluster.batch.list_namespaced_job(NS).items
    assert job.metadata.name == "tj-node-0"
    assert job.metadata.labels["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    assert job.status.succeeded == 2 and job.status.completed_indexes == "0-1"
    assert [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]

    # Its pods: JobSet's and the Job controller's labels, a hostname under the headless Service.
    pods = cluster.pods("tj")
    assert [p.metadata.generate_name for p in pods] == ["tj-node-0-0-", "tj-node-0-1-"]
    for rank, pod in enumerate(pods):
        labels = pod.metadata.labels
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "tj"
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert labels["jobset.sigs.k8s.io/job-index"] == "0"
        assert labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
        assert labels["batch.kubernetes.io/job-name"] == "tj-node-0"
        assert labels["batch.kubernetes.io/job-completion-index"] == str(rank)
        assert pod.metadata.annotations["batch.kubernetes.io/job-completion-index"] == str(rank)
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"tj-node-0-{rank}", "tj")
        assert pod.spec.restart_policy == "OnFailure"
        assert not pod.metadata.finalizers  # job-tracking, removed once counted
        printed = json.loads(trainer.pod_log(pod.metadata.name).strip())
        assert printed["PET_NODE_RANK"] == printed["JOB_COMPLETION_INDEX"] == str(rank)
        assert printed["PET_NNODES"] == "2" and printed["PET_NPROC_PER_NODE"] == "1"
        assert printed["HOSTNAME"] == f"tj-node-0-{rank}"
        if trainer.network_mode == "pods":  # as the torch plugin wrote it
            assert (printed["PET_MASTER_ADDR"], printed["PET_MASTER_PORT"]) == (
                "tj-node-0-0.tj",
                "29500",
            )
        else:
            assert printed["PET_MASTER_ADDR"] == "127.0.0.1"  # tj-node-0-0.tj, resolved here
        assert printed["EXTRA"] == "x"
    service = cluster.core.read_namespaced_service("tj", NS)
    assert service.spec.cluster_ip == "None"
    assert service.spec.selector == {"jobset.sigs.k8s.io/jobset-name": "tj"}
    assert service.spec.publish_not_ready_addresses is True
    snapshot = cluster.core.read_namespaced_config_map("tj-runtime-snapshot", NS)
    assert "name: torch-distributed" in snapshot.data["runtime"]
    reasons = [e.reason for e in cluster.events("tj-node-0", "Job")]
    assert reasons.count("SuccessfulCreate") == 2 and "Completed" in reasons
    assert [e.reason for e in cluster.events("tj", "JobSet")] == ["AllJobsCompleted"]


def test_master_address_and_port_reach_node_zero(cluster: Cluster, trainer: Emulator) -> None:
    code = """
import os, socket, time
addr, port = os.environ["PET_MASTER_ADDR"], int(os.environ["PET_MASTER_PORT"])
if os.environ["PET_NODE_RANK"] == "0":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((addr, port))
    server.listen()
    conn, _ = server.accept()
    conn.sendall(b"hello from node 0")
    conn.close()
else:
    for _ in range(300):
        try:
            conn = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.1)
    print(conn.recv(100).decode())
"""
    cluster.create(trainjob("ddp", ["python", "-c", code], trainer={"numNodes": 2}))
    cluster.ended("ddp")
    assert trainer.pod_log(cluster.pods("ddp")[1].metadata.name).strip() == "hello from node 0"


def test_nproc_per_node_follows_trainer_and_resources(cluster: Cluster) -> None:
    cases: list[tuple[Obj, str]] = [
        ({}, "1"),
        ({"resourcesPerNode": {"requests": {"cpu": "2500m"}}}, "3"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}}, "auto"),
        ({"numProcPerNode": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}}, "4"),
    ]
    for index, (options, expected) in enumerate(cases):
        name = f"nproc-{index}"
        cluster.create(trainjob(name, ["python", "-c", "pass"], suspend=True, trainer=options))
        jobset = wait_for(lambda name=name: cluster.jobset(name), what=f"JobSet {name}")  # type: ignore[misc]
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        node = pod["containers"][0]
        assert env_of(node)["PET_NPROC_PER_NODE"] == expected, options
        if "resourcesPerNode" in options:
            assert node["resources"] == options["resourcesPerNode"]
        assert jobset["spec"]["suspend"] is True


# --- runtimes and patches -----------------------------------------------------------------------


def test_runtime_ref_kind_picks_the_namespaced_or_the_cluster_runtime(
    cluster: Cluster, trainer: Emulator
) -> None:
    cluster.create(runtime("torch-distributed", env=[{"name": "EXTRA", "value": "namespaced"}]))
    ref = {"name": "torch-distributed", "kind": "TrainingRuntime"}
    cluster.create(trainjob("local", ["python", "-c", PRINT_ENV], runtime_ref=ref))
    cluster.create(trainjob("global", ["python", "-c", PRINT_ENV]))
    cluster.ended("local")
    cluster.ended("global")
    local = json.loads(trainer.pod_log(cluster.pods("local")[0].metadata.name))
    assert local["EXTRA"] == "namespaced"
    assert (
        cluster.jobset("local")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
            "spec"
        ]["containers"][0]["image"]
        == "pytorch/pytorch:2.3.0"
    )
    cluster_image = cluster.jobset("global")["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"][0]["image"]
    assert cluster_image == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert json.loads(trainer.pod_log(cluster.pods("global")[0].metadata.name))["EXTRA"] is None


def test_runtime_patches_reach_the_jobset_and_the_pods(cluster: Cluster, trainer: Emulator) -> None:
    patch = {
        "manager": "example.com/notebook",
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "metadata": {
                                            "labels": {"app": "nb"},
                                            "annotations": {"note": "patched"},
                                        },
                                        "spec": {
                                            "nodeSelector": {"pool": "gpu"},
                                            "tolerations": [{"key": "gpu", "operator": "Exists"}],
                                            "serviceAccountName": "trainer",
                                            "volumes": [{"name": "scratch", "emptyDir": {}}],
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "volumeMounts": [
                                                        {"name": "scratch", "mountPath": "/scratch"}
                                                    ],
                                                }
                                            ],
                                        },
                                    }
                                }
                            },
                        }
                    ]
                },
            }
        },
    }
    write = "open('/scratch/out.txt', 'w').write('ok'); print(open('/scratch/out.txt').read())"
    created = cluster.create(trainjob("patched", ["python", "-c", write], runtimePatches=[patch]))
    assert created["spec"]["runtimePatches"][0]["time"]  # stamped by the webhook
    cluster.ended("patched")
    jobset = cluster.jobset("patched")
    assert jobset["metadata"]["labels"] == {"team": "a"}
    (pod,) = cluster.pods("patched")
    assert pod.metadata.labels["app"] == "nb"
    assert pod.metadata.annotations["note"] == "patched"
    assert pod.spec.node_selector == {"pool": "gpu"}
    assert [(t.key, t.operator) for t in pod.spec.tolerations] == [("gpu", "Exists")]
    assert pod.spec.service_account_name == "trainer"
    assert [v.name for v in pod.spec.volumes] == ["scratch"]
    node = pod.spec.containers[0]
    assert [(m.name, m.mount_path) for m in node.volume_mounts] == [("scratch", "/scratch")]
    assert node.command[0] == "python"  # the patch merged into the container, not replaced it
    assert trainer.pod_log(pod.metadata.name).strip() == "ok"


def test_webhooks_and_crd_rules_refuse_what_the_real_ones_refuse(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as err:
        cluster.create(trainjob("lost", ["true"], runtime_ref={"name": "nope"}))
    assert err.value.status == 403
    message = body(err.value)["message"]
    assert message.startswith(
        'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
        "spec.RuntimeRef: Invalid value: v1alpha1.RuntimeRef{"
    )
    assert message.endswith(
        'clustertrainingruntimes.trainer.kubeflow.org "nope" not found: specified '
        "clusterTrainingRuntime must be created before the TrainJob is created"
    )

    with pytest.raises(ApiException) as err:
        env = [{"name": "PET_NNODES", "value": "9"}]
        cluster.create(trainjob("reserved", ["true"], trainer={"env": env}))
    assert err.value.status == 403
    assert (
        "must not have reserved envs, invalid envs configured: [PET_NNODES]"
        in body(err.value)["message"]
    )

    bad_patch = {"manager": "notebook", "trainingRuntimeSpec": {"template": {"spec": {}}}}
    with pytest.raises(ApiException) as err:
        cluster.create(trainjob("patch", ["true"], runtimePatches=[bad_patch]))
    assert (
        'spec.runtimePatches.manager: Invalid value: "notebook": must be a domain-prefixed'
        in (body(err.value)["message"])
    )

    with pytest.raises(ApiException) as err:
        cluster.create(trainjob("a.b", ["true"]))
    assert err.value.status == 422
    assert body(err.value)["message"] == (
        'TrainJob.trainer.kubeflow.org "a.b" is invalid: Invalid value: "object": '
        "metadata.name must match RFC 1035 DNS label format"
    )

    cluster.create(trainjob("fixed", ["python", "-c", "pass"], suspend=True))
    with pytest.raises(ApiException) as err:
        cluster.patch("fixed", {"spec": {"trainer": {"numNodes": 3}}})
    assert err.value.status == 422
    assert body(err.value)["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": field is immutable',
            "field": "spec.trainer",
        }
    ]


def test_without_webhooks_a_missing_runtime_is_an_event_until_it_exists() -> None:
    with Emulator(apis=("trainer",), webhooks=False) as emu, emu.api_client() as api:
        cluster = Cluster(api)
        cluster.create(
            trainjob(
                "early",
                ["python", "-c", "pass"],
                runtime_ref={"name": "later", "kind": "TrainingRuntime"},
            )
        )
        event = wait_for(lambda: cluster.events("early"), what="an Event")[0]
        assert (event.type, event.reason, event.source.component) == (
            "Warning",
            "TrainJobResourcesCreationFailed",
            "trainer-trainjob-controller",
        )
        assert event.message == (
            "TrainJob resources reconciliation failed: TrainingRuntime specified in TrainJob is "
            'not found: trainingruntimes.trainer.kubeflow.org "later" not found'
        )
        assert "status" not in cluster.trainjob("early")
        cluster.create(runtime("later"))
        cluster.ended("early")

        # v2.3.0's reconcile panics on a kind it has no runtime for: nothing is written.
        cluster.create(trainjob("odd", ["true"], runtime_ref={"name": "x", "kind": "Runtime"}))
        time.sleep(1)
        assert "status" not in cluster.trainjob("odd")
        jobsets = cluster.co.list_namespaced_custom_object(JOBSET, V1ALPHA2, NS, "jobsets")
        assert [j["metadata"]["name"] for j in jobsets["items"]] == ["early"]


def test_the_webhook_refuses_an_unsupported_runtime_kind(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as err:
        cluster.create(trainjob("odd", ["true"], runtime_ref={"name": "x", "kind": "Runtime"}))
    assert err.value.status == 403
    assert body(err.value)["message"] == (
        'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
        "unsupported runtime: Runtime.trainer.kubeflow.org"
    )
