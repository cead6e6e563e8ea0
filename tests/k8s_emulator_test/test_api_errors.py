"""The API's refusals, ``kubectl`` against the emulator, and its request accounting."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test.clusters import (
    GROUP,
    NS,
    SLEEP,
    VERSION,
    Cluster,
    error_body,
    finished_pods,
    pytorchjob,
    wait_for,
)

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
    # The operator calls the job Succeeded once its master has; the worker may still be
    # initialising then (its init container waits for the master's name).
    wait_for(lambda: finished_pods(cluster, "kc", 2), 60, "both pods to complete")
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
