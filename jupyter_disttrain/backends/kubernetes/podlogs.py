"""Reading a job's pods and their logs through the API server.

:func:`stream_log` yields one container's lines (following it when asked);
:func:`job_pods` finds a job's pods whichever Kubeflow kind made them;
:func:`kept_logs` reads the logs kept when a job failed (its pods may be gone);
:func:`rank_lines` is the pure part of ``logs()``: lines by rank, the job's own
signed control lines left out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ...runtime import jobkey, rankprefix
from ...runtime.protocol import is_signed
from . import kinds
from .client import Connection, api_error, explain
from .logs import logs_name


def stream_log(
    conn: Connection,
    pod: str,
    container: str,
    *,
    follow: bool,
    tail: int | None = None,
    previous: bool = False,
) -> Iterator[str]:
    """Lines of a pod's log (following it until the container ends when ``follow``).

    ``previous``: the log of the container's previous run (before its last restart). A pod
    not started yet, or gone, yields nothing.
    """
    try:
        resp: Any = conn.core.read_namespaced_pod_log(
            pod,
            conn.namespace,
            container=container,
            follow=follow,
            tail_lines=tail,
            previous=previous,
            _preload_content=False,
        )
    except api_error() as exc:
        if exc.status in (400, 404):  # not started yet / gone
            return
        raise explain(exc, kind="Pod", name=pod, namespace=conn.namespace) from None
    pending = b""
    try:
        for chunk in resp.stream(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                yield raw.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:
        resp.release_conn()


def job_pods(conn: Connection, name: str) -> list[Any]:
    """The pods of job ``name`` (of whichever Kubeflow kind it is)."""
    for selector in dict.fromkeys(k.pod_selector(name) for k in kinds.KINDS):
        pods: Any = conn.core.list_namespaced_pod(conn.namespace, label_selector=selector)
        if pods.items:
            return list(pods.items)
    return []


def kept_logs(conn: Connection, name: str) -> dict[str, str] | None:
    """The logs kept when job ``name`` failed (pod -> text), or None if there are none."""
    try:
        found: Any = conn.core.read_namespaced_config_map(logs_name(name), conn.namespace)
    except api_error() as exc:
        if exc.status == 404:
            return None
        record = logs_name(name)
        raise explain(exc, kind="ConfigMap", name=record, namespace=conn.namespace) from None
    return {str(k): str(v) for k, v in (found.data or {}).items()}


def pod_texts(conn: Connection, pods: list[Any]) -> dict[str, str]:
    """Each pod's whole log (pod name -> text), read from its training container."""
    texts = {}
    for pod in sorted(pods, key=lambda p: str(p.metadata.name)):
        names = [c.name for c in pod.spec.containers]
        ours = [k.container for k in kinds.KINDS if k.container in names]
        container = (ours or names)[0]
        lines = stream_log(conn, pod.metadata.name, container, follow=False)
        texts[str(pod.metadata.name)] = "\n".join(lines)
    return texts


def rank_lines(
    texts: Mapping[str, str], key: bytes | None, rank: int | None, tail: int | None
) -> str:
    """The lines of ``texts`` (pod -> log) a user reads: with ``rank`` None every line, each
    with its rank prefix (or ``[pod]`` where it has none); else that rank's lines without it.
    Lines signed with ``key`` (the job's own control lines) are left out; printed look-alikes
    stay. ``tail``: only the last so many lines (0: none)."""
    signer = jobkey.Signer(key) if key is not None else None
    lines: list[str] = []
    for pod_name in sorted(texts):
        for line in texts[pod_name].splitlines():
            got, text = rankprefix.split(line)
            if signer is not None and is_signed(text, signer):
                continue  # the job's own control line (printed look-alikes stay)
            if rank is None:
                lines.append(line if got is not None else f"[{pod_name}] {line}")
            elif got == rank:
                lines.append(text)
    return "\n".join(lines if tail is None else lines[-tail:] if tail > 0 else [])
