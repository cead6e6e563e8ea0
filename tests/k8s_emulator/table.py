"""Server-side printing: ``meta.k8s.io/v1`` Tables, what ``kubectl get`` asks for."""

from __future__ import annotations

import time
from typing import Any

from .meta import Obj, parse_time
from .resources import CONFIGMAPS, EVENTS, JOBS, PODS, SECRETS, SERVICES, Resource


def age(stamp: str | None) -> str:
    """``kubectl``'s short duration: 5s, 3m20s, 4h, 2d..."""
    if not stamp:
        return "<unknown>"
    seconds = max(0, int(time.time() - parse_time(stamp)))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _jsonpath(obj: Obj, path: str) -> Any:
    """The tiny JSONPath subset printer columns use: ``.a.b``, ``.a[-1:].b``, ``.a[0].b``."""
    node: Any = obj
    for part in path.strip(".").split("."):
        name, _, index = part.partition("[")
        if name:
            node = node.get(name) if isinstance(node, dict) else None
        if index and isinstance(node, list):
            spec = index.rstrip("]")
            if ":" in spec:
                start = int(spec.split(":")[0] or 0)
                node = node[start:][0] if node[start:] else None
            else:
                node = node[int(spec)] if -len(node) <= int(spec) < len(node) else None
        if node is None:
            return None
    return node


def _pod_row(pod: Obj) -> list[Any]:
    status = pod.get("status", {})
    statuses = status.get("containerStatuses", [])
    ready = sum(1 for s in statuses if s.get("ready"))
    total = len(pod.get("spec", {}).get("containers", []))
    reason = status.get("reason") or status.get("phase", "Pending")
    for container in statuses:
        state = container.get("state", {})
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            reason = state["terminated"].get("reason") or reason
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    return [f"{ready}/{total}", reason, restarts]


def _job_row(job: Obj) -> list[Any]:
    status = job.get("status") or {}
    true = {c["type"] for c in status.get("conditions", []) if c.get("status") == "True"}
    state = next(
        (s for s in ("Complete", "Failed", "Suspended", "FailureTarget") if s in true), "Running"
    )
    completions = job.get("spec", {}).get("completions")
    done = f"{status.get('succeeded', 0)}/{completions if completions is not None else 1}"
    start, end = status.get("startTime"), status.get("completionTime")
    duration = ""
    if start:
        seconds = int((parse_time(end) if end else time.time()) - parse_time(start))
        duration = f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"
    return [state, done, duration]


def _columns(resource: Resource) -> list[tuple[str, str]]:
    if resource is PODS:
        return [("Ready", "string"), ("Status", "string"), ("Restarts", "integer")]
    if resource in (CONFIGMAPS, SECRETS):
        return [("Data", "integer")]
    if resource is SERVICES:
        return [("Type", "string"), ("Cluster-IP", "string")]
    if resource is JOBS:
        return [("Status", "string"), ("Completions", "string"), ("Duration", "string")]
    if resource is EVENTS:
        return [
            ("Type", "string"),
            ("Reason", "string"),
            ("Object", "string"),
            ("Message", "string"),
        ]
    return [(c["name"], "string") for c in resource.printer_columns if c["name"] != "Age"]


def _cells(resource: Resource, obj: Obj) -> list[Any]:
    if resource is PODS:
        return _pod_row(obj)
    if resource in (CONFIGMAPS, SECRETS):
        return [len(obj.get("data") or {}) + len(obj.get("binaryData") or {})]
    if resource is SERVICES:
        return [obj["spec"].get("type", "ClusterIP"), obj["spec"].get("clusterIP", "")]
    if resource is JOBS:
        return _job_row(obj)
    if resource is EVENTS:
        ref = obj.get("involvedObject", {})
        return [
            obj.get("type"),
            obj.get("reason"),
            f"{str(ref.get('kind', '')).lower()}/{ref.get('name')}",
            obj.get("message"),
        ]
    return [_jsonpath(obj, c["jsonPath"]) for c in resource.printer_columns if c["name"] != "Age"]


def table(resource: Resource, items: list[Obj], resource_version: str) -> Obj:
    """A Table of ``items`` with NAME, the resource's own columns and AGE."""
    names = [("Name", "string"), *_columns(resource), ("Age", "string")]
    columns = [
        {
            "name": name,
            "type": kind,
            "format": "name" if name == "Name" else "",
            "description": "",
            "priority": 0,
        }
        for name, kind in names
    ]
    rows = []
    for obj in items:
        meta = obj["metadata"]
        partial = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
        }
        cells = [meta["name"], *_cells(resource, obj), age(meta.get("creationTimestamp"))]
        rows.append({"cells": cells, "object": partial})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }
