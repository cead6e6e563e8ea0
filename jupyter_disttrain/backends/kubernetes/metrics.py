"""``--prometheus``: rank 0's metrics endpoint, its Service and ServiceMonitor (pure; no I/O).

Rank 0 serves every rank's reported metrics at ``/metrics`` (Prometheus text
format, :mod:`jupyter_disttrain.runtime.metrics_server`) on its pod's IP, which
the downward API passes in ``DISTRAIN_METRICS_ADDR``. The Service
``NAME-metrics`` selects rank 0's pod by the labels its controller sets
(:meth:`~.kinds.base.KubeflowKind.leader_selector`); the
``ServiceMonitor`` (Prometheus Operator, ``monitoring.coreos.com/v1``) makes
Prometheus scrape it. Both are owned by the job, so they go with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .kinds.base import KubeflowKind
    from .options import K8sOptions

MONITORING_GROUP: Final = "monitoring.coreos.com"
MONITORING_VERSION: Final = "v1"
SERVICE_MONITORS: Final = "servicemonitors"
PORT_NAME: Final = "metrics"
LABEL_METRICS: Final = "disttrain.jupyter.org/metrics"
SCRAPE_INTERVAL: Final = "15s"


def service_name(job: str) -> str:
    """The Service in front of job ``job``'s metrics endpoint."""
    return f"{job}-metrics"


def metrics_env(opts: K8sOptions) -> list[dict[str, Any]]:
    """The training container's environment that turns the endpoint on (empty without it)."""
    if opts.prometheus is None:
        return []
    return [
        {"name": "DISTRAIN_METRICS_PORT", "value": str(opts.prometheus)},
        {"name": "DISTRAIN_METRICS_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]


def service(
    job: str, namespace: str | None, kind: KubeflowKind, port: int, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The Service selecting rank 0's pod, port ``metrics``."""
    meta: dict[str, Any] = {"name": service_name(job)}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {**labels, LABEL_METRICS: "true"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "selector": kind.leader_selector(job),
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def service_monitor(job: str, namespace: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    """The ServiceMonitor that has Prometheus scrape the job's metrics Service."""
    meta: dict[str, Any] = {"name": job}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return {
        "apiVersion": f"{MONITORING_GROUP}/{MONITORING_VERSION}",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": {**labels, LABEL_METRICS: "true"}},
            "endpoints": [{"port": PORT_NAME, "path": "/metrics", "interval": SCRAPE_INTERVAL}],
        },
    }


def metrics_objects(
    job: str,
    namespace: str | None,
    kind: KubeflowKind,
    opts: K8sOptions,
    labels: Mapping[str, str],
) -> list[dict[str, Any]]:
    """The Service and ServiceMonitor of a ``--prometheus`` job (none without it)."""
    if opts.prometheus is None:
        return []
    return [
        service(job, namespace, kind, opts.prometheus, labels),
        service_monitor(job, namespace, labels),
    ]
