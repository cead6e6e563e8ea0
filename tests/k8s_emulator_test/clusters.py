"""Helpers of the emulator's own tests: a Kubeflow v1 job's parts, the client APIs of one
emulator, polling."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import psutil
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests import waiting

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


def present(check: Callable[[], T | None]) -> Callable[[], T | None]:
    """``check``, an object not created yet (404) read as None."""

    def read() -> T | None:
        try:
            return check()
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None

    return read


def wait_for(check: Callable[[], T | None], timeout: float = 15.0, what: str = "") -> T:
    """:func:`tests.waiting.wait_for` of ``check``, an object not created yet read as None."""
    value = waiting.wait_for(present(check), timeout, what or repr(check))
    assert value is not None  # the wait returns a truthy value
    return value


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
