"""Kubernetes objects -> job events (pure).

Maps a pod's phase, container state and conditions to per-rank facts, and
Warning Events to messages, so the monitor explains why a job is stuck (a
job's own state is its kind's: :meth:`~.kinds.base.KubeflowKind.condition`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ... import events as ev
from ..streams import line_events
from .staging import INIT_NAME


@dataclass(frozen=True)
class PodFacts:
    """What one pod says about its ranks."""

    name: str
    node: int
    phase: str
    state: str  # Pending / Running / Succeeded / Failed / Restarting / Waiting
    reason: str
    message: str
    exit_code: int | None
    restarts: int
    started: bool  # the training container has started at least once
    ended: str = ""  # the identity of the run's end (:func:`end_identity`), "" while it runs


def pod_facts(pod: dict[str, Any], container: str, node: int) -> PodFacts:
    """Summarise a pod (as a JSON dict) for the ranks it runs as node ``node`` (which its
    kind tells: :meth:`~.kinds.base.KubeflowKind.node_index`)."""
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    phase = str(status.get("phase", "Pending"))
    cs = _container_status(pod, container)
    restarts = int(cs.get("restartCount", 0) or 0)
    state = cs.get("state") or {}
    reason, message, exit_code, ended = "", "", None, ""
    started = bool(cs.get("started")) or "running" in state or "terminated" in state or restarts > 0
    summary = phase
    if "waiting" in state and state["waiting"] is not None:
        waiting = state["waiting"]
        reason, message = str(waiting.get("reason", "")), str(waiting.get("message", ""))
        summary = "Restarting" if restarts and reason == "CrashLoopBackOff" else "Pending"
    elif "terminated" in state and state["terminated"] is not None:
        summary, reason, message, exit_code, ended = _run_end(state["terminated"])
    elif "running" in state and state["running"] is not None:
        summary = "Running"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and str(cond.get("status")) == "False":
            reason = str(cond.get("reason", "Unschedulable"))
            message = str(cond.get("message", ""))
            summary = "Pending"
    return PodFacts(
        str(meta.get("name", "")),
        node,
        phase,
        summary,
        reason,
        message,
        exit_code,
        restarts,
        started,
        ended,
    )


def _container_status(pod: dict[str, Any], container: str) -> dict[str, Any]:
    """The status of ``container`` (else the pod's first container's; {} before any)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    named = (c for c in statuses if c.get("name") == container)
    return dict(next(named, statuses[0] if statuses else {}))


def end_identity(terminated: dict[str, Any]) -> str:
    """Which run a container's ``terminated`` state ends: its container ID, else (a
    runtime that gives none) its start and finish times."""
    return str(
        terminated.get("containerID")
        or f"{terminated.get('startedAt')}/{terminated.get('finishedAt')}"
    )


def previous_run(pod: dict[str, Any], container: str, now: PodFacts) -> PodFacts | None:
    """The facts of the pod's run before ``now`` (:func:`pod_facts` of ``pod``), from its
    container's ``lastState`` (None when it has not restarted). A pod whose run ended and
    whose next one started between two reads of it (a kubelet writes its status now and
    then) says that run's end only there."""
    term = (_container_status(pod, container).get("lastState") or {}).get("terminated")
    if not term:
        return None
    state, reason, message, exit_code, ended = _run_end(term)
    return replace(
        now,
        state=state,
        reason=reason,
        message=message,
        exit_code=exit_code,
        restarts=max(now.restarts - 1, 0),
        ended=ended,
    )


def _run_end(terminated: dict[str, Any]) -> tuple[str, str, str, int, str]:
    """``(state, reason, message, exit code, end identity)`` of a container's
    ``terminated`` state (its current one, or its ``lastState``)."""
    exit_code = int(terminated.get("exitCode", 0))
    return (
        "Succeeded" if exit_code == 0 else "Failed",
        str(terminated.get("reason", "")),
        str(terminated.get("message", "") or ""),
        exit_code,
        end_identity(terminated),
    )


def rank_events(facts: PodFacts, nproc: int) -> list[ev.Event]:
    """One ``rank`` event per rank the pod runs."""
    reason = f"{facts.reason}: {facts.message}".strip(": ") if facts.message else facts.reason
    return [
        ev.rank_event(
            facts.node * nproc + local,
            facts.state,
            exit_code=facts.exit_code,
            reason=reason,
            host=facts.name,
            node=facts.node,
            pod=facts.name,
        )
        for local in range(nproc)
    ]


def warning_message(event: dict[str, Any]) -> str:
    """``FailedScheduling on job-worker-0: 0/3 nodes are available: ...``."""
    involved = event.get("involvedObject") or {}
    return f"{event.get('reason', 'Warning')} on {involved.get('name', '?')}: " + str(
        event.get("message", "")
    )


def init_state(pod: dict[str, Any], name: str) -> tuple[str, str]:
    """``(state, message)`` of init container ``name``: ``""`` (none or waiting), ``running``,
    ``done`` or ``failed`` (also once it is restarting after a failure) with what it said.

    The message is the copier's own ``distrain: ...`` line when the termination
    message (its log's last lines) holds one, else that message's last line.
    """
    found = _init_status(pod, name)
    if found is None:
        return "", ""
    failed = _failed_run(found)
    if failed is not None:
        return "failed", _last_word(str(failed.get("message") or failed.get("reason") or ""))
    state = found.get("state") or {}
    if state.get("terminated"):
        return "done", ""
    return ("running", "") if state.get("running") else ("", "")


def init_output(pod: dict[str, Any], name: str) -> str:
    """What init container ``name``'s failed run left as its termination message (its log's
    last lines: the copier's own signed lines among them); "" when it has not failed."""
    found = _init_status(pod, name)
    failed = None if found is None else _failed_run(found)
    return "" if failed is None else str(failed.get("message") or "")


def copier_events(pod: dict[str, Any], trust: ev.Trust | None, source: str) -> list[ev.Event]:
    """The ``staging`` events of the signed lines a failed ``--data`` copier left in pod
    ``source``'s termination message, believed as its followed log's would be (``trust``):
    what it said of the failure, whichever pod failed first (node 0's log may say it later)."""
    return [
        event
        for line in init_output(pod, INIT_NAME).splitlines()
        for event in line_events(line, None, trust, source=source, prefixed=True)
        if event.kind == "staging"
    ]


def _init_status(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return next((c for c in statuses if c.get("name") == name), None)


def _failed_run(status: dict[str, Any]) -> dict[str, Any] | None:
    """The ``terminated`` record of the container's current or last run when it exited
    non-zero; else None."""
    state, last = status.get("state") or {}, status.get("lastState") or {}
    for term in (state.get("terminated"), last.get("terminated")):
        if term and int(term.get("exitCode", 0)) != 0:
            return dict(term)
    return None


def _last_word(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith("distrain: ")]
    return (own or lines or ["exited with an error"])[-1].removeprefix("distrain: ")
