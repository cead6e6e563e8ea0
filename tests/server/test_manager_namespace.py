"""The sidebar's namespace section over HTTP against the API emulator: every TrainJob of the
namespace, whoever started it, followed with one watch per kind; foreign jobs read-only
unless RBAC lets the user delete them."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.server.manager import JobManager
from jupyter_disttrain.service.namespace import StopRefused
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.trainer_status import audience, status_path
from tests.waiting import wait_for_value

MANIFEST = Path(__file__).resolve().parents[1] / "data" / "kubeflow_custom_trainer.yaml"
NAMES = [f"sdk-job-{i}" for i in range(3)]


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """Three suspended SDK-style TrainJobs (no pods: only their objects are followed)."""
    with Emulator(apis=("trainer",), trainer_status=True) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        base = yaml.safe_load(MANIFEST.read_text())
        with emulator.api_client() as api:
            for name in NAMES:
                job = {
                    **base,
                    "metadata": {"name": name},
                    "spec": {**base["spec"], "suspend": True},
                }
                client.CustomObjectsApi(api).create_namespaced_custom_object(
                    "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", job
                )
            for name in NAMES:  # the controller has said so
                wait_for_value(
                    lambda n=name: client.CustomObjectsApi(api).get_namespaced_custom_object(
                        "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", n
                    ),
                    lambda obj: bool((obj.get("status") or {}).get("conditions")),
                )
        yield emulator


def report(emu: Emulator, name: str, percent: int) -> None:
    """What the job's own code posts to the Trainer's status endpoint."""
    pod = {"metadata": {"name": f"{name}-node-0-0", "namespace": "default"}, "spec": {}}
    token = emu.api.tokens.issue(pod, audience("default", name))
    stamp = "2026-01-01T00:00:00Z"
    body = {
        "trainerStatus": {
            "progressPercentage": percent,
            "lastUpdatedTime": stamp,
            "metrics": [{"name": "loss", "value": "0.5"}],
        }
    }
    context = ssl.create_default_context(cafile=str(emu.root / "trainer-status-tls" / "ca.crt"))
    port = emu.trainer_status.port  # type: ignore[union-attr]
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{status_path('default', name)}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}"},
    )
    urllib.request.urlopen(request, context=context, timeout=10).read()


def test_the_namespace_section_follows_every_trainjob_with_one_watch(cluster: Emulator) -> None:
    manager = JobManager(backends=lambda: [KubernetesBackend()])
    try:
        first = manager.namespace()
        rows = {j["name"]: j for j in first["jobs"]}
        assert set(rows) == set(NAMES) and first["backends"][0]["ok"]
        row = rows[NAMES[0]]
        assert (row["workload"], row["state"], row["foreign"], row["started_by"]) == (
            "TrainJob",
            "Pending",
            True,
            "",
        )
        assert row["progress"] is None and row["nodes"] == 2 and row["can_stop"]
        # listed by the first call and by the watch of each kind; one watch: TrainJobs only
        wait_for_value(
            lambda: (cluster.stats().count(verb="list"), cluster.stats().watches.current),
            lambda seen: seen == (6, 1),
        )
        cluster.reset_stats()
        for index, name in enumerate(NAMES):
            report(cluster, name, 10 * (index + 1))

        def progress() -> dict[str, int | None]:
            return {j["name"]: j["progress"] for j in manager.namespace()["jobs"]}

        assert wait_for_value(progress, lambda p: None not in p.values()) == dict(
            zip(NAMES, [10, 20, 30], strict=True)
        )
        stats = cluster.stats()
        asked = {k: v for k, v in stats.requests.items() if k[1] != "trainjobs/status"}
        assert asked == {}, asked  # every poll was answered from the watch
        assert stats.watches.current == 1
    finally:
        manager.close()
    wait_for_value(lambda: cluster.stats().watches.current, lambda n: n == 0)  # the watch is closed
    manager = JobManager(backends=lambda: [KubernetesBackend()])
    try:
        detail = manager.job("kubernetes", NAMES[2])  # the same dashboard for a foreign job
        assert detail["name"] == NAMES[2] and detail["state"] == "Pending"
        assert detail["progress"] is not None and detail["progress"]["step"] == 30
        assert manager.logs("kubernetes", NAMES[2], None, 100)["text"] == ""  # no pods yet
    finally:
        manager.close()


def test_a_foreign_job_is_read_only_without_rbac(cluster: Emulator) -> None:
    cluster.deny(verbs=["delete"], resources=["trainjobs"])
    manager = JobManager(backends=lambda: [KubernetesBackend()])
    try:
        rows = manager.namespace()["jobs"]
        assert [r["can_stop"] for r in rows] == [False] * len(NAMES)
        with pytest.raises(StopRefused, match="read-only here"):
            manager.stop("kubernetes", NAMES[0])
        assert cluster.stats().count(verb="delete") == 0
    finally:
        manager.close()
