"""The emulator playing Kubeflow Trainer v2 (TrainJob -> JobSet -> Jobs -> pods) and Kueue,
driven over HTTP by the real ``kubernetes`` client."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator

Obj = dict[str, Any]
T = TypeVar("T")
TRAINER, V1ALPHA1, NS = "trainer.kubeflow.org", "v1alpha1", "default"
JOBSET, V1ALPHA2 = "jobset.x-k8s.io", "v1alpha2"
PET = ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"]
PRINT_ENV = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
    f"{[*PET, 'HOSTNAME', 'JOB_COMPLETION_INDEX', 'EXTRA']}}}))"
)
SLEEP = "import time; print('up', flush=True); time.sleep(60)"


# --- helpers -----------------------------------------------------------------------------------


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ApiException as exc:
            if exc.status != 404:
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def body(exc: ApiException) -> Obj:
    result: Obj = json.loads(exc.body)
    return result


def trainjob(name: str, command: list[str] | None = None, **spec: Any) -> Obj:
    trainer = spec.pop("trainer", {})
    if command is not None:
        trainer = {"command": command, **trainer}
    body: Obj = {"runtimeRef": spec.pop("runtime_ref", {"name": "torch-distributed"}), **spec}
    if trainer:
        body["trainer"] = trainer
    labels = body.pop("labels", None)
    meta: Obj = {"name": name, **({"labels": labels} if labels else {})}
    return {
        "apiVersion": f"{TRAINER}/{V1ALPHA1}",
        "kind": "TrainJob",
        "metadata": meta,
        "spec": body,
    }


def runtime(
    name: str, env: list[Obj] | None = None, jobset: Obj | None = None, **job_spec: Any
) -> Obj:
    """A TrainingRuntime like ``torch-distributed``, with ``env`` on its node container,
    ``jobset`` in its JobSet spec and ``job_spec`` in its Job spec."""
    container: Obj = {"name": "node", "image": "pytorch/pytorch:2.3.0"}
    if env:
        container["env"] = env
    rjob = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {**job_spec, "template": {"spec": {"containers": [container]}}},
        },
    }
    return {
        "apiVersion": f"{TRAINER}/{V1ALPHA1}",
        "kind": "TrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [rjob], **(jobset or {})}},
        },
    }


class Cluster:
    """The typed clients a test needs."""

    def __init__(self, api_client: Any) -> None:
        self.co = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)

    def create(self, obj: Obj) -> Obj:
        plural = {"TrainJob": "trainjobs", "TrainingRuntime": "trainingruntimes"}[obj["kind"]]
        created: Obj = self.co.create_namespaced_custom_object(TRAINER, V1ALPHA1, NS, plural, obj)
        return created

    def trainjob(self, name: str) -> Obj:
        found: Obj = self.co.get_namespaced_custom_object(TRAINER, V1ALPHA1, NS, "trainjobs", name)
        return found

    def patch(self, name: str, patch: Obj) -> Obj:
        patched: Obj = self.co.patch_namespaced_custom_object(
            TRAINER, V1ALPHA1, NS, "trainjobs", name, patch
        )
        return patched

    def jobset(self, name: str) -> Obj:
        found: Obj = self.co.get_namespaced_custom_object(JOBSET, V1ALPHA2, NS, "jobsets", name)
        return found

    def condition(self, name: str, kind: str) -> Obj | None:
        status = self.trainjob(name).get("status") or {}
        return next((c for c in status.get("conditions", []) if c["type"] == kind), None)

    def ended(self, name: str, kind: str = "Complete", timeout: float = 60.0) -> Obj:
        def check() -> Obj | None:
            cond = self.condition(name, kind)
            other = self.condition(name, "Failed" if kind == "Complete" else "Complete")
            assert not (other and other["status"] == "True"), f"{name} ended: {other}"
            return cond if cond and cond["status"] == "True" else None

        return wait_for(check, timeout, f"{name} {kind}")

    def pods(self, name: str) -> list[Any]:
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        pods = self.core.list_namespaced_pod(NS, label_selector=selector).items
        return sorted(pods, key=lambda p: p.metadata.name)

    def running(self, name: str, count: int) -> list[Any]:
        def check() -> list[Any] | None:
            pods = [p for p in self.pods(name) if p.status.phase == "Running"]
            return pods if len(pods) == count else None

        return wait_for(check, 60, f"{count} running pods of {name}")

    def events(self, name: str, kind: str = "TrainJob") -> list[Any]:
        selector = f"involvedObject.name={name},involvedObject.kind={kind}"
        items: list[Any] = self.core.list_namespaced_event(NS, field_selector=selector).items
        return items


def env_of(spec: Any) -> dict[str, Any]:
    """A container's env as name -> value (or the ``valueFrom`` dict)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in spec.get("env", [])}


@pytest.fixture
def trainer() -> Iterator[Emulator]:
    with Emulator(apis=("trainer",)) as emulator:
        yield emulator


@pytest.fixture
def cluster(trainer: Emulator) -> Iterator[Cluster]:
    with trainer.api_client() as api_client:
        yield Cluster(api_client)


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


# --- failure ------------------------------------------------------------------------------------


def test_a_failing_node_fails_the_trainjob_at_the_jobs_backoff_limit(cluster: Cluster) -> None:
    crash = (
        "import os, sys, time; "
        "time.sleep(30) if os.environ['PET_NODE_RANK'] == '0' else sys.exit(3)"
    )
    cluster.create(runtime("strict", backoffLimit=0))
    ref = {"name": "strict", "kind": "TrainingRuntime"}
    cluster.create(
        trainjob("crash", ["python", "-c", crash], runtime_ref=ref, trainer={"numNodes": 2})
    )
    failed = cluster.ended("crash", "Failed")
    assert (failed["reason"], failed["message"]) == (
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: crash-node-0)",
    )
    job = cluster.batch.read_namespaced_job("crash-node-0", NS)
    conditions = {c.type: (c.reason, c.message) for c in job.status.conditions}
    assert (
        conditions["FailureTarget"]
        == conditions["Failed"]
        == (
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
    )
    assert cluster.trainjob("crash")["status"]["jobsStatus"][0]["failed"] == 1
    jobset = cluster.jobset("crash")
    assert jobset["status"]["terminalState"] == "Failed"
    wait_for(lambda: not cluster.pods("crash") or None, what="the sleeping node deleted")


def test_a_jobset_failure_policy_restarts_the_jobs(cluster: Cluster, trainer: Emulator) -> None:
    attempt = {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}}
    strict = runtime(
        "retry",
        env=[{"name": "ATTEMPT", "valueFrom": attempt}],
        jobset={"failurePolicy": {"maxRestarts": 1}},
        backoffLimit=0,
    )
    cluster.create(strict)
    code = (
        "import os, sys; attempt = os.environ['ATTEMPT']; print('attempt', attempt); "
        "sys.exit(attempt == '0')"
    )
    ref = {"name": "retry", "kind": "TrainingRuntime"}
    cluster.create(
        trainjob("retry", ["python", "-c", code], runtime_ref=ref, trainer={"numNodes": 2})
    )
    cluster.ended("retry")
    status = cluster.jobset("retry")["status"]
    assert (status["restarts"], status["restartsCountTowardsMax"]) == (1, 1)
    restarting = next(c for c in status["conditions"] if c["type"] == "RestartingJobSet")
    assert (restarting["status"], restarting["reason"]) == ("False", "JobSetCompleted")
    events = {e.reason: e.message for e in cluster.events("retry", "JobSet")}
    assert events["RestartJobSetFailurePolicyAction"] == (
        "applying RestartJobSet failure policy action (first failed job: retry-node-0)"
    )
    (job,) = cluster.batch.list_namespaced_job(NS).items
    assert job.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] == "1"
    for pod in cluster.pods("retry"):
        assert trainer.pod_log(pod.metadata.name).strip() == "attempt 1"


def test_a_crashing_node_under_on_failure_fails_after_six_restarts(cluster: Cluster) -> None:
    cluster.create(
        trainjob("loop", ["python", "-c", "import sys; sys.exit(1)"], trainer={"numNodes": 2})
    )
    failed = cluster.ended("loop", "Failed")
    assert failed["reason"] == "FailedJobs"
    job = cluster.batch.read_namespaced_job("loop-node-0", NS)
    assert job.spec.backoff_limit == 6
    assert [c.reason for c in job.status.conditions if c.type == "Failed"] == [
        "BackoffLimitExceeded"
    ]


def test_active_deadline_fails_the_trainjob_and_deletes_its_jobset(cluster: Cluster) -> None:
    cluster.create(trainjob("slow", ["python", "-c", SLEEP], activeDeadlineSeconds=2))
    cluster.running("slow", 1)
    failed = cluster.ended("slow", "Failed", timeout=30)
    assert (failed["reason"], failed["message"]) == (
        "DeadlineExceeded",
        "TrainJob exceeded its active deadline",
    )
    wait_for(lambda: not cluster.pods("slow") or None, what="pods gone")
    with pytest.raises(ApiException) as err:
        cluster.jobset("slow")
    assert err.value.status == 404


def test_deleting_a_trainjob_deletes_everything_it_made(
    cluster: Cluster, trainer: Emulator
) -> None:
    cluster.create(trainjob("gone", ["python", "-c", SLEEP], trainer={"numNodes": 2}))
    cluster.running("gone", 2)
    assert trainer.processes()
    cluster.co.delete_namespaced_custom_object(TRAINER, V1ALPHA1, NS, "trainjobs", "gone")

    def all_gone() -> bool:
        jobsets = cluster.co.list_namespaced_custom_object(JOBSET, V1ALPHA2, NS, "jobsets")
        return not (
            jobsets["items"]
            or cluster.batch.list_namespaced_job(NS).items
            or cluster.pods("gone")
            or [
                s
                for s in cluster.core.list_namespaced_service(NS).items
                if s.metadata.name == "gone"
            ]
            or [
                c
                for c in cluster.core.list_namespaced_config_map(NS).items
                if c.metadata.name.startswith("gone")
            ]
        )

    wait_for(all_gone, what="JobSet, Jobs, pods, Service and snapshot deleted")
    wait_for(lambda: not trainer.processes() or None, what="processes gone")


# --- suspend and Kueue ---------------------------------------------------------------------------


def test_a_queued_trainjob_waits_suspended_until_kueue_admits_it(
    cluster: Cluster, trainer: Emulator
) -> None:
    trainer.kueue.admit_after(1.5)
    labels = {"kueue.x-k8s.io/queue-name": "team-a"}
    created = cluster.create(trainjob("queued", ["python", "-c", PRINT_ENV], labels=labels))
    assert created["spec"]["suspend"] is True  # Kueue's webhook
    assert created["spec"]["runtimePatches"][0]["manager"] == "kueue.x-k8s.io/manager"
    suspended = wait_for(lambda: cluster.condition("queued", "Suspended"), what="Suspended")
    assert (suspended["status"], suspended["reason"], suspended["message"]) == (
        "True",
        "Suspended",
        "TrainJob is suspended",
    )
    jobset = cluster.jobset("queued")
    assert jobset["spec"]["suspend"] is True
    assert not cluster.pods("queued")
    cluster.ended("queued")
    resumed = cluster.condition("queued", "Suspended")
    assert resumed is not None
    assert (resumed["status"], resumed["reason"], resumed["message"]) == (
        "False",
        "Resumed",
        "TrainJob is resumed",
    )
    spec = cluster.trainjob("queued")["spec"]
    assert spec["suspend"] is False
    kueue_patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    assert kueue_patch["replicatedJobs"][0]["name"] == "node"
    (pod,) = cluster.pods("queued")
    assert pod.metadata.labels["kueue.x-k8s.io/podset"] == "node"
    assert pod.metadata.labels["kueue.x-k8s.io/local-queue-name"] == "team-a"
    assert pod.metadata.labels["kueue.x-k8s.io/cluster-queue-name"] == "cluster-queue"
    events = {e.reason: e.message for e in cluster.events("queued")}
    assert events["Started"] == "Admitted by clusterQueue cluster-queue"
    assert events["CreatedWorkload"].startswith("Created Workload: default/trainjob-queued-")


def test_a_full_queue_keeps_the_trainjob_suspended(cluster: Cluster, trainer: Emulator) -> None:
    trainer.kueue.set_full("team-a")
    labels = {"kueue.x-k8s.io/queue-name": "team-a"}
    cluster.create(trainjob("waiting", ["python", "-c", "pass"], labels=labels))
    wait_for(lambda: cluster.condition("waiting", "Suspended"), what="Suspended")
    time.sleep(1.5)
    assert cluster.trainjob("waiting")["spec"]["suspend"] is True
    assert not cluster.pods("waiting")
    assert not trainer.kueue.admitted("waiting")
    trainer.kueue.set_full("team-a", False)
    cluster.ended("waiting")


def test_kueue_preemption_suspends_the_trainjob_and_ends_its_pods(
    cluster: Cluster, trainer: Emulator
) -> None:
    labels = {"kueue.x-k8s.io/queue-name": "team-b"}
    trainer.kueue.set_cluster_queue("team-b", "gpu-queue")
    cluster.create(
        trainjob("victim", ["python", "-c", SLEEP], labels=labels, trainer={"numNodes": 2})
    )
    first = {p.metadata.name for p in cluster.running("victim", 2)}
    trainer.kueue.set_full("team-b")  # the preemptor holds the quota
    trainer.kueue.preempt("victim")
    assert cluster.trainjob("victim")["spec"]["suspend"] is True
    wait_for(lambda: not cluster.pods("victim") or None, what="pods deleted")
    suspended = cluster.condition("victim", "Suspended")
    assert suspended is not None and suspended["status"] == "True"
    assert cluster.jobset("victim")["spec"]["suspend"] is True
    stopped = wait_for(
        lambda: [e for e in cluster.events("victim") if e.reason == "Stopped"], what="Stopped"
    )
    assert stopped[0].message.startswith("Preempted to accommodate a workload")
    job = cluster.batch.read_namespaced_job("victim-node-0", NS)
    assert job.spec.suspend is True
    assert [c.reason for c in job.status.conditions if c.type == "Suspended"] == ["JobSuspended"]
    trainer.kueue.set_full("team-b", False)
    again = {p.metadata.name for p in cluster.running("victim", 2)}
    assert not again & first
    resumed = cluster.condition("victim", "Suspended")
    assert resumed is not None and resumed["reason"] == "Resumed"
    started = [e for e in cluster.events("victim") if e.reason == "Started"]
    assert started[0].message == "Admitted by clusterQueue gpu-queue" and started[0].count == 2


def test_suspend_and_resume_by_hand(cluster: Cluster) -> None:
    cluster.create(trainjob("manual", ["python", "-c", "pass"], suspend=True))
    wait_for(lambda: cluster.condition("manual", "Suspended"), what="Suspended")
    time.sleep(0.5)
    assert not cluster.pods("manual")
    cluster.patch("manual", {"spec": {"suspend": False}})
    cluster.ended("manual")


# --- which APIs are served ----------------------------------------------------------------------


def test_an_emulator_without_trainer_answers_404_for_it() -> None:
    with Emulator() as emu, emu.api_client() as api:
        groups = [g.name for g in client.ApisApi(api).get_api_versions().groups]
        assert TRAINER not in groups and JOBSET not in groups and "kubeflow.org" in groups
        co = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as err:
            co.get_api_resources(TRAINER, V1ALPHA1)
        assert err.value.status == 404
        with pytest.raises(ApiException) as err:
            co.create_namespaced_custom_object(
                TRAINER, V1ALPHA1, NS, "trainjobs", trainjob("x", ["true"])
            )
        assert err.value.status == 404
        assert body(err.value)["message"] == "the server could not find the requested resource"
        crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        assert {c.metadata.name for c in crds} == {
            "pytorchjobs.kubeflow.org",
            "tfjobs.kubeflow.org",
        }


def test_an_emulator_with_trainer_only_serves_its_groups(cluster: Cluster) -> None:
    api_client = cluster.co.api_client
    groups = [g.name for g in client.ApisApi(api_client).get_api_versions().groups]
    assert groups == ["apiextensions.k8s.io", "batch", JOBSET, TRAINER]
    resources = cluster.co.get_api_resources(TRAINER, V1ALPHA1)
    assert {r.name: r.namespaced for r in resources.resources} == {
        "trainjobs": True,
        "trainjobs/status": True,
        "trainingruntimes": True,
        "clustertrainingruntimes": False,
    }
    runtimes = cluster.co.list_cluster_custom_object(TRAINER, V1ALPHA1, "clustertrainingruntimes")
    assert sorted(r["metadata"]["name"] for r in runtimes["items"]) == [
        "jax-distributed", "torch-distributed",
    ]  # fmt: skip
    with pytest.raises(ApiException) as err:
        cluster.co.list_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs")
    assert err.value.status == 404


def test_both_apis_together_and_unknown_ones_refused() -> None:
    with pytest.raises(ValueError, match="unknown APIs"):
        Emulator(apis=("trainer", "kubeflow-v2"))
    with Emulator(apis=("trainer", "kubeflow-v1")) as emu, emu.api_client() as api:
        groups = [g.name for g in client.ApisApi(api).get_api_versions().groups]
        assert groups == ["apiextensions.k8s.io", "batch", JOBSET, "kubeflow.org", TRAINER]
        crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        assert {c.metadata.name for c in crds} == {
            "pytorchjobs.kubeflow.org",
            "tfjobs.kubeflow.org",
            "trainjobs.trainer.kubeflow.org",
            "trainingruntimes.trainer.kubeflow.org",
            "clustertrainingruntimes.trainer.kubeflow.org",
        }
        emu.remove_crds(TRAINER)
        with pytest.raises(ApiException) as err:
            client.CustomObjectsApi(api).get_api_resources(TRAINER, V1ALPHA1)
        assert err.value.status == 404
