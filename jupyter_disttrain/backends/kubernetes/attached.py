"""Objects created after a job and owned by it (``--prometheus``'s Service and ServiceMonitor).

They are not needed for the job to run: one that cannot be created is a
warning the notebook shows, never a failed submission.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from .client import Connection, api_error
from .metrics import MONITORING_GROUP, MONITORING_VERSION, SERVICE_MONITORS
from .template import with_owner


def create_owned(
    conn: Connection, objs: Sequence[Mapping[str, Any]], owner: Mapping[str, Any]
) -> list[str]:
    """Create ``objs`` owned by ``owner`` (the job as created); the warnings, one per problem."""
    warnings: list[str] = []
    for obj in objs:
        owned = with_owner(obj, owner)
        kind, name = str(owned["kind"]), str(owned["metadata"]["name"])
        try:
            if kind == "Service":
                conn.core.create_namespaced_service(conn.namespace, cast(Any, owned))
            elif kind == "ServiceMonitor":
                conn.custom.create_namespaced_custom_object(
                    MONITORING_GROUP, MONITORING_VERSION, conn.namespace, SERVICE_MONITORS, owned
                )
            else:
                raise ValueError(f"no way to create a {kind}")
        except api_error() as exc:
            if kind == "ServiceMonitor" and exc.status == 404:
                warnings.append(
                    "this cluster has no ServiceMonitor CRD (monitoring.coreos.com/v1, the "
                    f"Prometheus Operator), so no ServiceMonitor {name} was created; Prometheus "
                    f"can scrape Service {name}-metrics (port metrics, path "
                    "/metrics) with a scrape config of its own"
                )
            else:
                warnings.append(f"could not create {kind} {name}: {exc.status} {exc.reason}")
    return warnings
