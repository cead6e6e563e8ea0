"""A stream to a port of a job's rank-0 pod through the API server's ``pods/portforward``.

A live session's rank 0 listens on a port inside its pod (on 127.0.0.1). The
notebook may run outside the cluster (a laptop), so it reaches that port the
way ``kubectl port-forward`` does: through the API server, here with the
official client's ``kubernetes.stream.portforward`` (a WebSocket with the
``v4.channel.k8s.io`` protocol; one WebSocket per connection; RBAC needs
``get`` and ``create`` on ``pods/portforward``).

:func:`open_stream` forwards one port of one pod and returns a connected
``socket.socket``: one end of a local socket pair that the client's proxy
thread joins to the WebSocket (TCP-level options such as ``TCP_NODELAY`` are
accepted and ignored; closing it closes the WebSocket and the pod's side).
:func:`connect_job` finds the pod of node 0 (as the job's kind tells, e.g. a
PyTorchJob's Master), waits until it is Running and its port accepts, and
connects.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import BackendError
from .client import Connection, api_error, explain
from .kinds import pods_kind

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

#: How long a new forward is watched for the kubelet's refusal before it counts as connected
#: (the kubelet dials the pod's port when the WebSocket opens and reports a refusal at once;
#: at least twice as long as the upgrade took).
SETTLE = 0.3
#: Pause between looks while the pod starts or its port does not accept yet.
RETRY = 0.2
_ENDED = ("Succeeded", "Failed")


class PortRefused(BackendError):
    """Nothing accepted connections on the pod's port (the kubelet's error channel said so)."""


class _ForwardedSocket(socket.socket):
    """A socket-pair end standing for a TCP connection: TCP options are accepted and ignored."""

    def setsockopt(self, level: int, optname: int, value: Any, optlen: Any = None) -> None:
        if level == socket.IPPROTO_TCP:
            return None
        if optlen is None:
            super().setsockopt(level, optname, value)
        else:
            super().setsockopt(level, optname, value, optlen)
        return None


def leader_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The pod of node 0 (which runs rank 0) among a job's pods, or None.

    The pods' kind (:func:`~.kinds.pods_kind`) says which run node 0
    (:meth:`~.kinds.base.KubeflowKind.leader_pods`: pods that run no node, such
    as initializers, are not candidates). The newest pod that is neither being
    deleted nor ended is preferred (a replacement after a restart).
    """
    kind = pods_kind(pods)
    return _preferred(kind.leader_pods(pods) if kind is not None else [])


def _preferred(first: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest of ``first`` that is neither being deleted nor ended (else the newest)."""
    first.sort(key=lambda p: str(p["metadata"].get("creationTimestamp", "")), reverse=True)
    first.sort(
        key=lambda p: (
            bool(p["metadata"].get("deletionTimestamp")),
            str((p.get("status") or {}).get("phase")) in _ENDED,
        )
    )
    return first[0] if first else None


def node_pod(pods: list[dict[str, Any]], node: int) -> dict[str, Any] | None:
    """The pod of node ``node`` among a job's pods (as :func:`leader_pod` for node 0), or None."""
    kind = pods_kind(pods)
    if kind is None:
        return None
    leader = kind.pods_have_leader(pods)
    return _preferred(
        [p for p in pods if kind.runs_nodes(p) and kind.node_index(p, leader) == node]
    )


def handshake_failure(exc: ApiException) -> tuple[int, dict[str, Any]]:
    """The HTTP code and ``Status`` body of a refused WebSocket upgrade (0, {} if none).

    The client reports a refused upgrade as ``ApiException(status=0)`` whose
    reason is websocket-client's ``Handshake status CODE TEXT -+-+- HEADERS -+-+- BODY``.
    """
    text = str(exc.reason or "")
    if not text.startswith("Handshake status "):
        return 0, {}
    try:
        code = int(text.split()[2])
    except (IndexError, ValueError):
        return 0, {}
    try:
        body = json.loads(text.rsplit("-+-+-", 1)[-1].strip())
    except ValueError:
        body = {}
    return code, body if isinstance(body, dict) else {}


def _upgrade(conn: Connection, pod: str, port: int, timeout: float) -> Any:
    """The client's ``PortForward`` for ``pod``'s ``port`` (the WebSocket opened within timeout).

    ``kubernetes.stream.portforward`` swaps its ``ApiClient``'s ``request`` while
    it connects, so it gets an ``ApiClient`` of its own: requests other threads
    make on the connection's client (a job's watches and log streams) go on as HTTP.
    """
    from kubernetes import client
    from kubernetes.stream import portforward

    done = threading.Event()
    box: dict[str, Any] = {}
    lock = threading.Lock()

    def run() -> None:
        private = client.ApiClient(conn.api.configuration)
        private.default_headers.update(conn.api.default_headers)
        try:
            forward = portforward(
                client.CoreV1Api(private).connect_get_namespaced_pod_portforward,
                pod,
                conn.namespace,
                ports=str(port),
            )
        except BaseException as exc:  # reported to the caller
            box["error"] = exc
            private.close()
        else:
            private.close()  # the WebSocket does not use its connection pool
            with lock:
                if box.get("abandoned"):
                    forward.close()
                box["forward"] = forward
        done.set()

    threading.Thread(target=run, name=f"port-forward {pod}:{port}", daemon=True).start()
    if not done.wait(timeout):
        with lock:
            box["abandoned"] = True
        raise BackendError(
            f"the API server did not open a port-forward to pod {pod!r} within {timeout:g} s; "
            "check that the cluster is reachable (kubectl get pods) and retry"
        )
    if "error" in box:
        raise box["error"]
    return box["forward"]


def open_stream(
    conn: Connection, pod: str, port: int, *, timeout: float = 30.0, settle: float = SETTLE
) -> socket.socket:
    """A connected stream socket to ``port`` of ``pod`` through the API server.

    Raises :class:`PortRefused` when nothing listens on the port, and
    :class:`~.base.BackendError` naming the problem for a missing pod (404), a
    pod that does not run (400), missing rights (403) or credentials (401).
    """
    started = time.monotonic()
    try:
        forward = _upgrade(conn, pod, port, timeout)
    except api_error() as exc:
        raise _explain(exc, conn, pod, port) from None
    # A refusal comes one hop after the upgrade: a slow API server gets a longer look.
    settle = max(settle, 2 * (time.monotonic() - started))
    wrapped = forward.socket(port)
    inner = getattr(wrapped, "_socket", wrapped)
    sock = _ForwardedSocket(inner.family, inner.type, inner.proto, fileno=inner.detach())
    readable, _, _ = select.select([sock], [], [], settle)
    if readable:
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            first = b""
        if not first:  # the forward ended before any byte: the kubelet's error, or none
            sock.close()
            forward.close()
            error = str(forward.error(port) or "").strip()
            if "refused" in error:
                raise PortRefused(
                    f"nothing accepts connections on port {port} of pod {pod!r} (connection "
                    "refused through the API server's port-forward): the session's rank 0 is "
                    "not listening (yet, or any more); see its logs with %distrain_logs"
                )
            raise BackendError(
                f"the port-forward to port {port} of pod {pod!r} ended at once: "
                f"{error or 'the API server closed it'}"
            )
    return sock


def _explain(exc: ApiException, conn: Connection, pod: str, port: int) -> BackendError:
    code, status = handshake_failure(exc)
    if code == 0:
        return BackendError(
            f"could not open a port-forward to pod {pod!r} through the API server: "
            f"{exc.reason}. Check that the cluster is reachable (kubectl get pods)"
        )
    message = str(status.get("message") or "")
    if code == 400:
        return BackendError(
            f"the API server refused to forward port {port} of pod {pod!r} (400): {message}. "
            "The pod must be Running; see the job's state with %distrain_jobs"
        )
    failure = api_error()(status=code, reason=message)
    failure.body = json.dumps(status)
    if code == 404:
        return BackendError(
            f"pod {pod!r} not found in namespace {conn.namespace!r}: the job's pod is gone "
            "(the job ended or was stopped); start the session again"
        )
    return explain(failure, kind="Pod", name=pod, namespace=conn.namespace)


def _pod_state(pod: dict[str, Any]) -> str:
    """The pod's phase, with why a container waits when it does."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{phase} ({waiting['reason']})"
    return phase


def connect_job(
    conn: Connection,
    name: str,
    port: int,
    timeout: float,
    list_pods: Callable[[], list[dict[str, Any]]],
    pick: Callable[[list[dict[str, Any]]], dict[str, Any] | None] = leader_pod,
) -> socket.socket:
    """A connected socket to ``port`` of job ``name``'s rank-0 pod, within ``timeout`` seconds.

    ``list_pods`` lists the job's pods (as JSON dicts); ``pick`` chooses the pod among them
    (node 0's by default). Waits while the pod is
    missing or starting and while its port refuses; raises
    :class:`~.base.BackendError` when the pod has ended or on timeout.
    """
    deadline = time.monotonic() + timeout
    why = f"job {name!r} has no pod of node 0 in namespace {conn.namespace!r}"
    while True:
        pod = pick(list_pods())
        if pod is not None:
            pod_name = str(pod["metadata"]["name"])
            state = _pod_state(pod)
            phase = str((pod.get("status") or {}).get("phase") or "Pending")
            if phase in _ENDED:
                raise BackendError(
                    f"pod {pod_name!r} of job {name!r} has ended ({phase}): the session is "
                    "over; start it again"
                )
            if pod["metadata"].get("deletionTimestamp"):
                raise BackendError(
                    f"pod {pod_name!r} of job {name!r} is being deleted (the job was stopped or "
                    "is restarting it): the session is over; start it again"
                )
            why = f"pod {pod_name!r} of job {name!r} is {state}"
            if state == "Running":
                left = max(deadline - time.monotonic(), 1.0)
                try:
                    return open_stream(conn, pod_name, port, timeout=left)
                except PortRefused as exc:
                    why = str(exc)
        left = deadline - time.monotonic()
        if left <= 0:
            raise BackendError(
                f"could not connect to port {port} of job {name!r} within {timeout:g} s: {why}. "
                "Wait for the job to start (%distrain_jobs shows its state) or allow longer"
            )
        time.sleep(min(RETRY, left))
