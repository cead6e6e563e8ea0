"""The kind table: a kind added from outside the package is one class and one table entry.

``ToyJob`` lives here, not in the package: registering it in ``KINDS`` is all
it takes for ``--kubeflow-api toyjob`` to be accepted and for the backend's
``--dry-run`` path (``KubernetesBackend.plan``) to render its manifest, with
its container, launcher, pod labels and metrics Service selector.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes import KubernetesBackend, kinds
from jupyter_disttrain.backends.kubernetes.kinds.base import (
    Condition,
    JobInputs,
    KubeflowKind,
    Manifest,
)
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.kubernetes.options import OptionError
from jupyter_disttrain.backends.kubernetes.portforward import leader_pod
from jupyter_disttrain.backends.kubernetes.records import spec_from_object
from jupyter_disttrain.backends.kubernetes.template import job_metadata, pod_template
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.crd_schema import validate_manifest

INDEX = "example.org/toy-index"


class ToyKind(KubeflowKind):
    """One replica set of ``spec.replicas`` pods, numbered by a label."""

    def manifest(self, job: JobInputs) -> Manifest:
        template = pod_template(self, job)
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": job_metadata(job.spec, job.opts, job.versions, job.notebook),
            "spec": {"replicas": job.spec.nodes, "template": template},
        }

    def condition(self, obj: Mapping[str, Any]) -> Condition | None:
        phase = (obj.get("status") or {}).get("phase")
        return (phase, phase, "") if phase else None

    def shape(self, obj: Mapping[str, Any]) -> tuple[int, int]:
        return int(obj["spec"]["replicas"]), 1

    def has_leader(self, obj: Mapping[str, Any]) -> bool:
        return False

    def owns(self, pod: Mapping[str, Any]) -> bool:
        return INDEX in (pod.get("metadata") or {}).get("labels", {})

    def node_index(self, pod: Mapping[str, Any], has_leader: bool) -> int:
        return int(pod["metadata"]["labels"][INDEX])

    def pods_have_leader(self, pods: Sequence[Mapping[str, Any]]) -> bool:
        return False

    def leader_selector(self, job: str) -> dict[str, str]:
        return {self.pod_label: job, INDEX: "0"}


TOYJOB = ToyKind(
    group="example.org",
    version="v1",
    plural="toyjobs",
    kind="ToyJob",
    replicas_field="",
    replicas=("toy",),
    container="toy",
    port_name="toy-port",
    port=31337,
    frameworks=("pytorch",),
    launcher=("python", "-X", "dev", "-m", "jupyter_disttrain.runtime.worker"),
    pod_label="example.org/toy-job",
    api="toyjob",
    default=False,
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> KubeflowKind:
    """ToyJob registered (one table entry) and no cluster configured (render only)."""
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS, TOYJOB))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return TOYJOB


def test_an_unregistered_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(OptionError, match=r"use one of trainjob, pytorchjob$"):
        parse_options([("kubeflow_api", "toyjob")])


def test_a_registered_kind_renders_through_the_dry_run_path(toy: KubeflowKind) -> None:
    assert parse_options([("kubeflow_api", "toyjob")]).kubeflow_api == "toyjob"
    assert kinds.kind_of("pytorch", "toyjob") is toy
    assert kinds.kind_of("pytorch", None) is kinds.PYTORCHJOB  # not a default kind
    options = (("kubeflow_api", "toyjob"), ("image", "example.org/toy:1"), ("prometheus", "9100"))
    spec = JobSpec("toy-run", nodes=3, nproc=2, backend="kubernetes", options=options)
    plan = KubernetesBackend().plan(spec, build_payload("1 + 1", {}, job="toy-run"))
    objects = list(yaml.safe_load_all(str(plan)))
    assert [o["kind"] for o in objects] == ["Secret", "ToyJob", "Service", "ServiceMonitor"]
    job = objects[1]
    assert job["apiVersion"] == "example.org/v1" and job["spec"]["replicas"] == 3
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "toy" and container["image"] == "example.org/toy:1"
    assert container["command"][:4] == ["python", "-X", "dev", "-m"]
    assert container["command"][4:] == [
        "jupyter_disttrain.runtime.worker",
        "/opt/disttrain/payload/payload.pkl",
    ]
    assert {"name": "toy-port", "containerPort": 31337, "protocol": "TCP"} in container["ports"]
    assert objects[2]["spec"]["selector"] == {"example.org/toy-job": "toy-run", INDEX: "0"}
    read = spec_from_object(job, toy)
    assert (read.nodes, read.nproc, read.options) == (3, 1, (("kubeflow_api", "toyjob"),))


def test_the_kinds_limits_and_pods_come_from_the_kind(toy: KubeflowKind) -> None:
    pods = [{"metadata": {"name": f"toy-run-{i}", "labels": {INDEX: str(i)}}} for i in (2, 0, 1)]
    assert kinds.pods_kind(pods) is toy
    assert (leader_pod(pods) or {})["metadata"]["name"] == "toy-run-0"
    # the port of a registered kind is taken for --prometheus like the others
    with pytest.raises(OptionError, match="other than 2222, 23456, 29500 and 31337"):
        parse_options([("prometheus", "31337")])


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_a_lightning_cells_pods_import_it_ahead_unless_the_user_says_not_to(api: str) -> None:
    """Each pod's launcher imports the library once for the pod's ranks (``DISTRAIN_WARM``)."""
    cell = "import lightning.pytorch as pl\nimport torch\npl.seed_everything(0)"

    def warm_env(*env: tuple[str, str]) -> list[str | None]:
        spec = JobSpec(
            "pl-pods", nodes=2, nproc=8, backend="kubernetes", options=(("kubeflow_api", api),)
        )
        spec = spec.with_(env=env)
        plan = KubernetesBackend().plan(spec, build_payload(cell, {}, job="pl-pods"))
        job = [o for o in yaml.safe_load_all(str(plan)) if o["kind"] in ("PyTorchJob", "TrainJob")]
        found = [
            item.get("value") for item in _containers_env(job) if item["name"] == "DISTRAIN_WARM"
        ]
        return found

    assert set(warm_env()) == {"lightning.pytorch"}
    assert set(warm_env(("DISTRAIN_WARM", ""))) == {""}


def validated(manifest: dict[str, Any]) -> dict[str, Any]:
    validate_manifest(manifest)
    return manifest


def _containers_env(manifest: Any) -> list[dict[str, str]]:
    """Every ``env`` item of every container spec anywhere in ``manifest``."""
    found: list[dict[str, str]] = []
    if isinstance(manifest, dict):
        for key, value in manifest.items():
            if key == "env" and isinstance(value, list):
                found.extend(value)
            else:
                found.extend(_containers_env(value))
    elif isinstance(manifest, list):
        for item in manifest:
            found.extend(_containers_env(item))
    return found
