"""Connecting to a cluster with the official client, and explaining what it answers.

:func:`connect` loads a kubeconfig (context, namespace) or the in-cluster
configuration when the notebook itself runs in a pod. :func:`explain` turns
an ``ApiException`` into a :class:`~.base.BackendError` whose message names
the problem and the fix. The client package (half a second to import) is
imported on first use, not with this module: a notebook that never talks to a
cluster never loads it. Catch the client's errors with ``except api_error()``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import BackendError

if TYPE_CHECKING:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
RBAC_DOC = "docs/rbac.yaml"


def api_error() -> type[ApiException]:
    """The client's ``ApiException`` class (importing the client now if it was not yet)."""
    from kubernetes.client import exceptions

    error: type[ApiException] = exceptions.ApiException
    return error


def transport_error() -> type[Exception]:
    """urllib3's ``HTTPError`` (a cut stream, a refused connection), imported on first use."""
    from urllib3 import exceptions

    error: type[Exception] = exceptions.HTTPError
    return error


def timed_out(exc: BaseException) -> bool:
    """Whether urllib3 gave up a request for want of an answer within its time-out (after
    its retries, or at once in a stream)."""
    from urllib3 import exceptions

    reason = exc.reason if isinstance(exc, exceptions.MaxRetryError) else exc
    return isinstance(reason, exceptions.TimeoutError)


def error_words(exc: BaseException) -> str:
    """An error as a user reads it: the product's own errors are sentences already, the API
    server's answer is its status and reason, and any other error keeps its type's name."""
    if type(exc).__module__.startswith("jupyter_disttrain."):
        return str(exc)
    if isinstance(exc, api_error()):
        return f"the API server answered {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Connection:
    """An API client and the namespace jobs go to."""

    api: client.ApiClient
    namespace: str
    context: str | None

    @property
    def core(self) -> client.CoreV1Api:
        """The core/v1 API."""
        from kubernetes import client

        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        """The custom objects API (kubeflow.org)."""
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    def plain(self, obj: Any) -> dict[str, Any]:
        """A client model as the JSON dict the API server sent."""
        if isinstance(obj, dict):
            return obj
        data = self.api.sanitize_for_serialization(obj)
        return data if isinstance(data, dict) else {}


def _kubeconfig_path() -> str:
    """The kubeconfig to read now (``$KUBECONFIG``'s first file, else ``~/.kube/config``)."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return os.path.expanduser(first or "~/.kube/config")


def connect(context: str | None = None, namespace: str | None = None) -> Connection:
    """Connect with the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``) or in-cluster.

    Raises :class:`BackendError` when neither is available.
    """
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    config_file = _kubeconfig_path()
    try:
        contexts, active = config.list_kube_config_contexts(config_file=config_file)
    except (ConfigException, FileNotFoundError, OSError):
        contexts, active = [], None
    if contexts:
        if context is not None and context not in [c["name"] for c in contexts]:
            names = ", ".join(c["name"] for c in contexts)
            raise BackendError(
                f"kubeconfig has no context {context!r}; available: {names}. "
                "Pass one of them with --context"
            )
        chosen = next(c for c in contexts if c["name"] == context) if context else active
        api = config.new_client_from_config(config_file=config_file, context=context)
        ns = namespace or (chosen or {}).get("context", {}).get("namespace") or "default"
        return Connection(api, ns, (chosen or {}).get("name"))
    try:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
    except ConfigException:
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise BackendError(
            f"no Kubernetes configuration found: no kubeconfig at {where} and this notebook "
            "is not running in a pod. Set KUBECONFIG (or copy the cluster's kubeconfig to "
            "~/.kube/config) and pass --context if it has several contexts"
        ) from None
    ns = namespace or (SA_NAMESPACE.read_text().strip() if SA_NAMESPACE.exists() else "default")
    return Connection(client.ApiClient(cfg), ns, None)


def _status(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def explain(
    exc: ApiException, *, kind: str, name: str, namespace: str, unserved: str = ""
) -> BackendError:
    """A clear error for an API failure while acting on ``kind`` ``name``.

    ``unserved`` is the whole message for a 404 that means the cluster does not
    serve ``kind`` at all (a job kind's :meth:`~.kinds.base.KubeflowKind.unserved`).
    """
    status = _status(exc)
    message = str(status.get("message") or exc.reason or "")
    code = int(exc.status or 0)
    if code == 401:
        return BackendError(
            f"the cluster rejected the credentials (401 Unauthorized): {message}. Refresh them "
            "(log in again or renew the token in your kubeconfig) and retry"
        )
    if code == 403:
        return BackendError(
            f"not allowed (403 Forbidden): {message}. The minimal Role this tool needs is in "
            f"{RBAC_DOC} of jupyter_disttrain; ask an admin to apply it in namespace "
            f"{namespace!r} and bind it to your user or the notebook's service account"
        )
    if code == 404 and unserved:
        return BackendError(unserved)
    if code == 404:
        return BackendError(f"{kind} {name!r} not found in namespace {namespace!r}")
    if code == 409:
        return BackendError(
            f"a {kind} named {name!r} already exists in namespace {namespace!r} (409); choose "
            f"another --name, or remove the old one with %distrain_stop {name}"
        )
    if code == 422:
        causes = (status.get("details") or {}).get("causes") or []
        fields = "; ".join(f"{c.get('field', '?')}: {c.get('message', '')}" for c in causes)
        return BackendError(
            f"the API server rejected the {kind} {name!r} (422 Invalid): "
            f"{fields or message}. Fix the option that sets that field"
        )
    return BackendError(f"Kubernetes API error {code} on {kind} {name!r}: {message}")
