"""The PyTorchJob kind: a Worker waiting in the operator's init container for the Master's name."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.backends.kubernetes.kinds.pytorchjob import INIT_CONTAINER, PYTORCHJOB

#: The operator's own init container (kubeflow/training-operator, as the emulator renders it).
COMMAND = [
    "sh",
    "-c",
    "err=1;for i in $(seq 100); do if nslookup job-master-0; then err=0 && break; fi;"
    "echo waiting for master; sleep 2; done; exit $err",
]


def worker(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {"initContainers": [{"name": INIT_CONTAINER, "command": COMMAND}]},
        "status": {"initContainerStatuses": [{"name": INIT_CONTAINER, "state": state}]},
    }


def test_a_worker_waits_for_the_masters_name_while_its_init_container_runs() -> None:
    running = worker({"running": {"startedAt": "2026-11-28T10:00:51Z"}})
    assert PYTORCHJOB.name_wait(running) == (INIT_CONTAINER, "job-master-0")
    assert PYTORCHJOB.name_wait(worker({"terminated": {"exitCode": 0}})) is None
    assert PYTORCHJOB.name_wait({"spec": {}, "status": {}}) is None
