"""The emulator playing Kubeflow Trainer's status server (feature gate ``TrainJobStatus``):
a TrainJob created by ``kubectl create -f`` reports its own progress into
``status.trainerStatus`` through the injected endpoint."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_emulator import Emulator
from tests.k8s_emulator.trainer_status import audience, status_path
from tests.waiting import wait_for

MANIFEST = Path(__file__).resolve().parents[1] / "data" / "kubeflow_custom_trainer.yaml"
NAME = "sdk-custom-trainer"


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(apis=("trainer",), trainer_status=True) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def kubectl(emu: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Any:
    config = emu.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")

    def run(*args: str) -> str:
        done = subprocess.run(
            ["kubectl", f"--kubeconfig={config}", *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


@pytest.fixture(scope="module")
def finished(emu: Emulator, kubectl: Any) -> list[dict[str, Any]]:
    """The foreign TrainJob created, followed (every trainerStatus seen) until Complete."""
    assert "created" in kubectl("create", "--validate=false", "-f", str(MANIFEST))
    seen: list[dict[str, Any]] = []

    def complete() -> bool:
        obj = json.loads(kubectl("get", "trainjob", NAME, "-o", "json"))
        status = obj.get("status") or {}
        if status.get("trainerStatus") and status["trainerStatus"] not in seen:
            seen.append(status["trainerStatus"])
        return any(
            c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions", [])
        )

    wait_for(complete, 60, "the TrainJob to complete")
    return seen


def test_pods_get_the_endpoint_token_and_ca(emu: Emulator, finished: Any, kubectl: Any) -> None:
    pods = json.loads(
        kubectl("get", "pods", "-l", f"jobset.sigs.k8s.io/jobset-name={NAME}", "-o", "json")
    )["items"]
    assert len(pods) == 2
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
        "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/{NAME}/status"
    )
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
    volume = next(v for v in pods[0]["spec"]["volumes"] if v["name"] == "kubeflow-trainer-token")
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == audience("default", NAME)
    config = json.loads(kubectl("get", "configmap", f"{NAME}-tls-config", "-o", "json"))
    assert config["metadata"]["ownerReferences"][0]["name"] == NAME
    assert "BEGIN CERTIFICATE" in config["data"]["ca.crt"]


def test_progress_moves_then_is_final(emu: Emulator, finished: Any, kubectl: Any) -> None:
    percents = [s.get("progressPercentage") for s in finished]
    assert len(set(percents)) >= 2 and percents == sorted(percents), percents
    obj = yaml.safe_load(kubectl("get", "trainjob", NAME, "-o", "yaml"))
    final = obj["status"]["trainerStatus"]
    assert final["progressPercentage"] == 100
    assert final["estimatedRemainingSeconds"] == 0
    assert {"name": "loss", "value": "0.3333"} in final["metrics"]
    assert final["lastUpdatedTime"].endswith("Z")
    table = kubectl("get", "trainjob", NAME)
    assert "PROGRESS %" in table.splitlines()[0]
    assert table.splitlines()[1].split()[2] == "100"
    assert set(emu.trainer_status.posts(NAME)) == {200}  # type: ignore[union-attr]


def _post(emu: Emulator, path: str, token: str, body: Any) -> tuple[int, dict[str, Any]]:
    ca = emu.root / "trainer-status-tls" / "ca.crt"
    context = ssl.create_default_context(cafile=str(ca))
    port = emu.trainer_status.port  # type: ignore[union-attr]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}", data=data, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_the_endpoint_refuses_as_the_controller_does(emu: Emulator, finished: Any) -> None:
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {}}
    good = emu.api.tokens.issue(pod, audience("default", NAME))
    other = emu.api.tokens.issue(pod, audience("default", "another-job"))
    elsewhere = emu.api.tokens.issue(
        {**pod, "metadata": {"name": "p", "namespace": "team"}}, audience("default", NAME)
    )
    path = status_path("default", NAME)
    stamp = "2026-01-01T00:00:00Z"
    assert _post(emu, path, "not-a-token", {})[0] == 403
    assert _post(emu, path, other, {})[0] == 403  # the audience names another TrainJob
    assert _post(emu, path, elsewhere, {})[0] == 403  # a pod of another namespace
    assert _post(emu, path, good, b"{not json")[1]["message"] == "Invalid payload"
    too_far = {"trainerStatus": {"progressPercentage": 150, "lastUpdatedTime": stamp}}
    code, answer = _post(emu, path, good, too_far)
    assert code == 422 and "less than or equal to 100" in answer["message"]
    code, answer = _post(emu, path, good, {"trainerStatus": {"progressPercentage": 5}})
    assert code == 422 and "lastUpdatedTime is required" in answer["message"]
    assert _post(emu, path, good, {}) == (200, {})  # nothing to write
    missing = status_path("default", "gone")
    gone = emu.api.tokens.issue(pod, audience("default", "gone"))
    assert _post(emu, missing, gone, {"trainerStatus": {"lastUpdatedTime": stamp}})[0] == 404
    assert _post(emu, "/healthz", good, {})[0] == 404
    code, _ = _post(emu, path, good, b" " * (70 * 1024))
    assert code == 413
