"""The emulator playing Kubeflow Trainer v2: failures, suspension and Kueue, and which APIs
an emulator serves."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test.trainjobs import (
    JOBSET,
    NS,
    PRINT_ENV,
    SLEEP,
    TRAINER,
    V1ALPHA1,
    V1ALPHA2,
    Cluster,
    body,
    cluster,
    runtime,
    trainer,
    trainjob,
    wait_for,
)

__all__ = ["cluster", "trainer"]  # the fixtures this module uses


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
    # the deadline counts from the whole-second creationTimestamp: room to reach Running first
    cluster.create(trainjob("slow", ["python", "-c", SLEEP], activeDeadlineSeconds=6))
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
        "jax-distributed",
        "torch-distributed",
    ]
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
