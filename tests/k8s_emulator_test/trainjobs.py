"""Helpers and fixtures of the emulator's Trainer v2 tests: TrainJob and runtime objects,
the client APIs of an emulator serving the Trainer APIs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test import clusters

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


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """:func:`.clusters.wait_for`, 30 s unless told: a TrainJob's JobSet, Jobs and pods come
    one after the other."""
    return clusters.wait_for(check, timeout, what)


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
