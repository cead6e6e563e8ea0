"""Listing rows and specs read back from Kubernetes objects: jobs and training runtimes (pure)."""

from __future__ import annotations

from typing import Any, cast

from ..spec import JobSpec
from . import manifests as mf
from .base import JobRecord, RuntimeRecord
from .k8s_kinds import TRAINJOB, KubeflowKind
from .k8s_labels import read_labels
from .k8s_status import job_condition
from .k8s_trainjob import LABEL_FRAMEWORK, trainjob_condition, trainjob_shape


def runtime_record(obj: dict[str, Any], scope: str) -> RuntimeRecord:
    """A (Cluster)TrainingRuntime as a listing row: framework label, image, nodes."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    image = ""
    for rjob in ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
        pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
        for container in (pod or {}).get("containers") or []:
            if container.get("name") == TRAINJOB.container and container.get("image"):
                image = str(container["image"])
    nodes = (spec.get("mlPolicy") or {}).get("numNodes")
    return RuntimeRecord(
        name=str(meta.get("name", "")),
        scope=scope,
        framework=str((meta.get("labels") or {}).get(LABEL_FRAMEWORK, "")),
        image=image,
        nodes=int(nodes) if nodes is not None else None,
    )


def spec_from_object(obj: dict[str, Any], kubeflow: KubeflowKind) -> JobSpec:
    """A JobSpec describing an existing job (for attaching to it)."""
    labels = tuple(read_labels(obj.get("metadata") or {}).items())
    if kubeflow is TRAINJOB:
        nodes, procs = trainjob_shape(obj)
        return JobSpec(
            name=str(obj["metadata"]["name"]), nodes=nodes, nproc=procs, backend="kubernetes",
            options=(("kubeflow_api", TRAINJOB.api),), labels=labels,
        )  # fmt: skip
    framework = "tensorflow" if kubeflow.api == "" else "pytorch"
    spec = obj.get("spec", {})
    replicas = spec.get("pytorchReplicaSpecs") or spec.get("tfReplicaSpecs") or {}
    nodes = sum(int(r.get("replicas", 1)) for r in replicas.values()) or 1
    nproc = spec.get("nprocPerNode") or (spec.get("elasticPolicy") or {}).get("nProcPerNode") or 1
    try:
        nproc = int(nproc)
    except (TypeError, ValueError):
        nproc = 1
    return JobSpec(
        name=str(obj["metadata"]["name"]),
        nodes=nodes,
        nproc=nproc,
        backend="kubernetes",
        framework=cast(Any, framework),
        options=(("kubeflow_api", kubeflow.api),) if kubeflow.api else (),
        labels=labels,
    )


def record_from_object(obj: dict[str, Any], kubeflow: KubeflowKind) -> JobRecord:
    """A job listing row from a custom object."""
    spec = spec_from_object(obj, kubeflow)
    state = trainjob_condition(obj) if kubeflow is TRAINJOB else job_condition(obj)
    meta = obj.get("metadata", {})
    notebook = notebook_annotation(meta)
    created = _timestamp(meta.get("creationTimestamp"))
    ended = _timestamp((obj.get("status") or {}).get("completionTime"))
    return JobRecord(
        name=spec.name,
        backend="kubernetes",
        state=state[0] if state else "Pending",
        world_size=spec.world_size,
        nodes=spec.nodes,
        nproc=spec.nproc,
        created=created or 0.0,
        ended=ended,
        reason=state[2] if state else "",
        owner=str(meta.get("namespace", "")),
        extra={**read_labels(meta), **({"notebook": notebook} if notebook else {})},
    )


def notebook_annotation(meta: dict[str, Any]) -> str:
    """The notebook that created the job, from its annotation ("" when absent)."""
    return str((meta.get("annotations") or {}).get(mf.ANNOTATION_NOTEBOOK) or "")


def _timestamp(text: Any) -> float | None:
    if not text:
        return None
    import datetime

    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
