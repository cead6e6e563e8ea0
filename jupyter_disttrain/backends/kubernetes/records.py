"""Listing rows and specs read back from a job object of any kind (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from ...spec import JobSpec
from ..base import JobRecord, ScopeFacts
from .kinds import KubeflowKind
from .labels import read_labels
from .template import ANNOTATION_NOTEBOOK, LABEL_MANAGED_BY, MANAGED_BY


def spec_from_object(obj: Mapping[str, Any], kubeflow: KubeflowKind) -> JobSpec:
    """A JobSpec describing an existing job of kind ``kubeflow`` (for attaching to it): its
    shape as the kind reads it, the kind's framework and ``--kubeflow-api``, its labels."""
    meta = obj.get("metadata") or {}
    nodes, nproc = kubeflow.shape(obj)
    return JobSpec(
        name=str(meta["name"]),
        nodes=nodes,
        nproc=nproc,
        backend="kubernetes",
        framework=cast(Any, kubeflow.frameworks[0]),
        options=(("kubeflow_api", kubeflow.api),) if kubeflow.api else (),
        labels=tuple(read_labels(meta).items()),
    )


def record_from_object(obj: Mapping[str, Any], kubeflow: KubeflowKind) -> JobRecord:
    """A job listing row from a custom object."""
    spec = spec_from_object(obj, kubeflow)
    state = kubeflow.condition(obj)
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


def namespace_record(obj: Mapping[str, Any], kubeflow: KubeflowKind) -> JobRecord:
    """A listing row of any job of the namespace (``--all``): :func:`record_from_object`
    with who started it, its kind and the progress it reports (see
    :meth:`~..base.Backend.list_namespace`)."""
    record = record_from_object(obj, kubeflow)
    labels = (obj.get("metadata") or {}).get("labels") or {}
    started_by = str(labels.get(LABEL_MANAGED_BY) or "")
    reported = kubeflow.reported(obj)
    facts = ScopeFacts(
        foreign=started_by != MANAGED_BY,
        workload=kubeflow.kind,
        started_by=started_by,
        progress=None if reported is None else reported.percent,
        eta=None if reported is None else reported.eta,
        reported_metrics={} if reported is None else dict(reported.metrics),
    )
    return replace(record, facts=facts)


def notebook_annotation(meta: Mapping[str, Any]) -> str:
    """The notebook that created the job, from its annotation ("" when absent)."""
    return str((meta.get("annotations") or {}).get(ANNOTATION_NOTEBOOK) or "")


def _timestamp(text: Any) -> float | None:
    if not text:
        return None
    import datetime

    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
