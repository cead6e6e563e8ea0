"""Reading a job's pods and their logs through the API server.

:func:`stream_log` yields one container's lines (following it when asked);
:func:`run_lines` reads runs of a container that may restart while it is read;
:func:`failed_job_texts` reads what a failed job's pods said, to keep it;
:func:`restarted_log` reads a container's log, its previous run's first when it restarted;
:func:`job_pods` finds a job's pods whichever Kubeflow kind made them;
:func:`kept_logs` reads the logs kept when a job failed (its pods may be gone);
:func:`job_shape` reads a job's shape (what its lines are checked against);
:func:`rank_lines` is the pure part of ``logs()``: lines by rank, the job's own
signed control lines left out but for a rank's error, shown as its traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ... import events as ev
from ...runtime import rankprefix
from ...runtime.protocol import is_signed
from ...terminal import physical_lines, terminal_lines
from ..loglines import relayed_error, shown_lines
from . import kinds
from .client import Connection, api_error, explain, timed_out, transport_error
from .logs import logs_name
from .status import pod_facts

#: How long a log read that does not follow waits for the API server to send anything
#: (its answer, then each next chunk) before it gives up with :class:`LogReadTimeout`
#: (urllib3 tries a request that got no answer again, three times by default): a failed
#: pod's events wait for its log to be read (watch.py), and a server that never answers
#: must not hold them back until the job ends.
READ_TIMEOUT = 10.0


class LogReadTimeout(TimeoutError):
    """The API server sent nothing of a pod's log for the read's time-out."""


#: Lines kept of a pod that did not fail, when its job failed.
KEPT_TAIL_LINES = 200


def stream_log(
    conn: Connection,
    pod: str,
    container: str,
    *,
    follow: bool,
    tail: int | None = None,
    previous: bool = False,
    read_timeout: float = READ_TIMEOUT,
) -> Iterator[str]:
    """Lines of a pod's log (following it until the container ends when ``follow``).

    ``previous``: the log of the container's previous run (before its last restart). A pod
    not started yet, or gone, yields nothing. A read that does not follow raises
    :class:`LogReadTimeout` when the API server sends nothing for ``read_timeout`` seconds.
    """
    waits = None if follow else (read_timeout, read_timeout)  # connect, then each read
    try:
        with _given_up(pod, read_timeout):
            resp: Any = conn.core.read_namespaced_pod_log(
                pod,
                conn.namespace,
                container=container,
                follow=follow,
                tail_lines=tail,
                previous=previous,
                _preload_content=False,
                _request_timeout=waits,
            )
    except api_error() as exc:
        if exc.status in (400, 404):  # not started yet / gone
            return
        raise explain(exc, kind="Pod", name=pod, namespace=conn.namespace) from None
    pending = b""
    try:
        with _given_up(pod, read_timeout):
            for chunk in resp.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    yield raw.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:  # read to its end, or given up: either way the connection is not reused
        resp.close()
        resp.release_conn()


@contextlib.contextmanager
def _given_up(pod: str, seconds: float) -> Iterator[None]:
    """urllib3's time-out of a log read as :class:`LogReadTimeout`, naming the pod."""
    try:
        yield
    except transport_error() as exc:
        if not timed_out(exc):
            raise
        raise LogReadTimeout(
            f"the API server sent nothing of pod {pod}'s log for {seconds:g} s a try; "
            "its read was given up"
        ) from exc


def restarted_log(
    conn: Connection, pod: str, container: str, restarts: int, tail: int | None = None
) -> list[str]:
    """A container's log lines (its last ``tail``, when given); of a container that
    restarted, its previous run's (the one that failed) first."""
    lines = list(stream_log(conn, pod, container, follow=False, tail=tail))
    if restarts > 0:
        lines[:0] = stream_log(conn, pod, container, follow=False, previous=True)
    return lines


def restart_count(
    conn: Connection, pod: str, container: str, *, read_timeout: float = READ_TIMEOUT
) -> int | None:
    """The container's ``restartCount`` now; None when the pod is gone or cannot be read,
    also when the API server answers nothing for ``read_timeout`` seconds a try."""
    try:
        found: Any = conn.core.read_namespaced_pod(
            pod, conn.namespace, _request_timeout=(read_timeout, read_timeout)
        )
    except (api_error(), transport_error(), OSError):
        return None
    return pod_facts(conn.plain(found), container, 0).restarts


def run_lines(
    read: Callable[[bool], list[str]],
    restarts_now: Callable[[], int | None],
    first: int,
    last: int | None = None,
) -> list[str]:
    """The log of a container's runs ``first`` to ``last`` (their restart counts; ``last``
    is ``first`` unless given), as far as they can still be read, and perhaps lines of the
    run after them.

    The log API names runs only as current and previous (``read(previous)``), and the
    container may restart while it is read. Restart counts only grow: when the count after
    reading the current log is ``n + 1`` with ``n`` a wanted run, that read got ``n`` or the
    run after it, so the previous run's log (``n``) comes first. A current read that the
    previous log begins with was of that same run, and is not given twice. A run two
    restarts back is gone; what was read is all there is.
    """
    last = first if last is None else last
    current = read(False)
    count = restarts_now()
    if count is None or not first <= count - 1 <= last:
        return current
    previous = read(True)
    if previous[: len(current)] == current:  # the same run, read again after it ended
        return previous
    return previous + current


def failed_job_texts(
    conn: Connection, container: str, pods: Mapping[str, tuple[str, int]]
) -> dict[str, str]:
    """What a failed job's ``pods`` (name -> (state, restarts)) said, failing pods first:
    a failing pod's whole log (after its previous run's, when it restarted), the other
    pods' last :data:`KEPT_TAIL_LINES` lines; a pod already gone says so."""
    texts: dict[str, str] = {}
    for pod, (state, restarts) in sorted(
        pods.items(), key=lambda kv: (kv[1][0] != "Failed", kv[0])
    ):
        failing = state == "Failed" or restarts > 0
        tail = None if failing else KEPT_TAIL_LINES
        try:
            texts[pod] = "\n".join(restarted_log(conn, pod, container, restarts, tail))
        except Exception as exc:  # a pod that is already gone: keep what can be kept
            texts[pod] = f"(log not readable: {exc})"
    return texts


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
    """Each pod's whole log (pod name -> text), read from its training container: of a
    container that restarted, its previous run's (the one that failed), then its own."""
    texts = {}
    for pod in sorted(pods, key=lambda p: str(p.metadata.name)):
        names = [c.name for c in pod.spec.containers]
        ours = [k.container for k in kinds.KINDS if k.container in names]
        container = (ours or names)[0]
        restarts = pod_facts(conn.plain(pod), container, 0).restarts
        texts[str(pod.metadata.name)] = "\n".join(
            restarted_log(conn, pod.metadata.name, container, restarts)
        )
    return texts


def job_texts(
    conn: Connection, name: str, pick: Callable[[Any], bool] | None = None
) -> dict[str, str] | None:
    """What job ``name``'s pods said (pod name -> text): the logs kept when it failed, else
    the logs of its pods still there (those ``pick`` takes; all by default).
    None when the job has neither kept logs nor pods.

    The job's follower keeps the logs before it deletes the pods, so the kept logs are
    asked again after the pods were read: a pod deleted while the pods were read reads
    as an empty log, and its failing rank's error would be missing.
    """
    texts = kept_logs(conn, name)
    if texts is not None:
        return texts
    pods = job_pods(conn, name)
    if not pods:
        return kept_logs(conn, name)
    texts = pod_texts(conn, [pod for pod in pods if pick is None or pick(pod)])
    return kept_logs(conn, name) or texts


def job_object(conn: Connection, name: str) -> tuple[kinds.KubeflowKind, dict[str, Any]] | None:
    """Job ``name``'s kind and object (as plain JSON), or None when no served kind has it;
    an API error other than not-found is explained (:func:`.client.explain`)."""
    for kubeflow in kinds.KINDS:
        try:
            obj = conn.custom.get_namespaced_custom_object(
                kubeflow.group, kubeflow.version, conn.namespace, kubeflow.plural, name
            )
        except api_error() as exc:
            if exc.status == 404:
                continue
            ns = conn.namespace
            raise explain(
                exc, kind=kubeflow.kind, name=name, namespace=ns, unserved=kubeflow.unserved()
            ) from None
        return kubeflow, conn.plain(obj)
    return None


def job_shape(conn: Connection, name: str) -> tuple[int, int] | None:
    """Job ``name``'s (nodes, nproc) from its object, or None when no served kind has it."""
    found = job_object(conn, name)
    return None if found is None else found[0].shape(found[1])


def rank_lines(
    texts: Mapping[str, str], trust: ev.Trust | None, rank: int | None, tail: int | None
) -> str:
    """The lines of ``texts`` (pod -> log) a user reads: with ``rank`` None every line, each
    with its rank prefix (or ``[pod]`` where it has none); else that rank's lines without it.
    The job's own control lines (signed under ``trust``) are left out but for a rank's error,
    shown as its traceback (:func:`.loglines.shown_lines`); an error rank 0 relayed for another
    rank shows as that rank's when the rank's own log holds none. Printed look-alikes stay;
    carriage returns read as a terminal shows them (:func:`.terminal.terminal_lines`).
    ``tail``: only the last so many lines (0: none)."""
    read = [
        (pod, *rankprefix.split(line))
        for pod in sorted(texts)
        for line in physical_lines(texts[pod])
    ]
    own = {got for _, got, text in read if got is not None and _own_error(text, got, trust)}
    lines: list[tuple[tuple[str, int | None], str]] = []  # per (pod, rank) stream
    for pod, got, text in read:
        if trust is None or not is_signed(text, trust.signer):
            shown = [(got, text)]
        else:
            shown = [(got, s) for s in shown_lines(text, got, trust)]
            relayed = relayed_error(text, trust) if got == 0 else None
            if relayed is not None and relayed[0] not in own:
                shown = [(relayed[0], s) for s in relayed[1]]
        lines.extend(((pod, who), out) for who, out in shown)
    seen: list[str] = []
    for (pod, who), out in terminal_lines(lines):
        if rank is None:
            seen.append(f"[rank {who}] {out}" if who is not None else f"[{pod}] {out}")
        elif who == rank:
            seen.append(out)
    return "\n".join(seen if tail is None else seen[-tail:] if tail > 0 else [])


def _own_error(text: str, rank: int, trust: ev.Trust | None) -> bool:
    """Whether ``text`` of ``rank``'s stream is that rank's own believed error."""
    if trust is None or '"kind":"error"' not in text or not is_signed(text, trust.signer):
        return False
    event = ev.parse_line(text, rank, trust=trust)
    return event.kind == "error" and event.rank == rank
