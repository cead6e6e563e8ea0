"""The scale harness: a TrainJob or PyTorchJob of N nodes x P stand-in ranks on the emulator.

The job's manifests are the Kubernetes backend's own (payload Secret with the job
key, the TrainJob or PyTorchJob), with each container's command replaced by the
stand-in runtime (``python -m jupyter_disttrain.runtime.standin``, see
:mod:`jupyter_disttrain.runtime.standin`) and ``DISTRAIN_STANDIN_JOB`` in its
environment, so the emulator's kubelet hosts every node's ranks in node 0's one
process (``tests/k8s_emulator/standin.py``) while serving N pods through the API.
The notebook side follows it as any job (``service.attach``).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.standin import ENV_JOB

KINDS = ("trainjob", "pytorchjob")


def standin_command(nodes: int, nproc: int, **script: Any) -> list[str]:
    """The stand-in's command line for ``nodes`` x ``nproc`` ranks; ``script``: its options
    by field name (``steps=30, stragglers=(5, 9), fail_rank=3, fail_step=10`` ...)."""
    argv = ["python", "-m", "jupyter_disttrain.runtime.standin"]
    argv += ["--nodes", str(nodes), "--nproc", str(nproc)]
    for name, value in script.items():
        if value is None:
            continue
        text = ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
        argv += [f"--{name.replace('_', '-')}", text]
    return argv


def standin_objects(
    name: str, kind: str, nodes: int, nproc: int, hang_after: float, **script: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload Secret and the job (our manifests) with stand-in containers."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    options = (("kubeflow_api", "trainjob"),) if kind == "trainjob" else ()
    spec = JobSpec(name, nodes=nodes, nproc=nproc, backend="kubernetes", options=options)
    payload_obj, job = KubernetesBackend().objects(spec, build_payload("1", {}, job=name))[:2]
    command = standin_command(nodes, nproc, **script)
    env = [
        {"name": ENV_JOB, "value": name},
        {"name": "DISTRAIN_HANG_AFTER", "value": str(hang_after)},
    ]
    if kind == "trainjob":
        trainer = job["spec"]["trainer"]
        trainer["command"] = command
        trainer.pop("args", None)
        trainer["env"] = [e for e in trainer.get("env", []) if e["name"] != ENV_JOB] + env
    else:
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            container = replica["template"]["spec"]["containers"][0]
            container["command"] = command
            container.pop("args", None)
            container["env"] = container.get("env", []) + env
    return payload_obj, job


def create_standin_job(
    emulator: Emulator,
    name: str,
    kind: str,
    nodes: int,
    nproc: int = 8,
    hang_after: float = 300.0,
    **script: Any,
) -> None:
    """Create a stand-in job of ``nodes`` x ``nproc`` ranks on ``emulator``."""
    payload_obj, job = standin_objects(name, kind, nodes, nproc, hang_after, **script)
    api = emulator.api_client()
    try:
        k8s.CoreV1Api(api).create_namespaced_secret("default", payload_obj)
        if kind == "trainjob":
            k8s.CustomObjectsApi(api).create_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", job
            )
        else:
            k8s.CustomObjectsApi(api).create_namespaced_custom_object(
                "kubeflow.org", "v1", "default", "pytorchjobs", job
            )
    finally:
        api.close()
