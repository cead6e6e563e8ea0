"""What RBAC lets this user do to a job, asked as ``kubectl auth can-i`` does.

A SelfSubjectAccessReview (``authorization.k8s.io/v1``) names the verb, the
job's group, resource, namespace and name; the API server answers for the
credentials of this connection. Listing and following a job of the namespace
need only ``get``/``list``/``watch``; stopping one needs ``delete`` on its
kind (``docs/rbac.yaml``).
"""

from __future__ import annotations

from . import kinds
from .client import Connection, api_error


def allowed(conn: Connection, verb: str, group: str, resource: str, name: str = "") -> bool | None:
    """Whether ``verb`` on ``resource`` (``name``) of ``group`` is allowed in the namespace;
    None when the cluster does not answer access reviews."""
    from kubernetes import client

    attributes = client.V1ResourceAttributes(
        verb=verb, group=group, resource=resource, namespace=conn.namespace, name=name or None
    )
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
    )
    try:
        answer = client.AuthorizationV1Api(conn.api).create_self_subject_access_review(review)
    except api_error() as exc:
        if exc.status in (403, 404):  # reviews not served, or not allowed to ask
            return None
        raise
    return bool(answer.status and answer.status.allowed)


def may_delete(conn: Connection, name: str) -> bool | None:
    """Whether this user may delete job ``name`` (of whichever served kind holds it); None
    when no kind holds it or the cluster does not say."""
    for kubeflow in kinds.KINDS:
        try:
            conn.custom.get_namespaced_custom_object(
                kubeflow.group, kubeflow.version, conn.namespace, kubeflow.plural, name
            )
        except api_error() as exc:
            if exc.status in (403, 404):
                continue
            raise
        return allowed(conn, "delete", kubeflow.group, kubeflow.plural, name)
    return None
