"""Kubernetes objects -> job events (pure).

Maps a PyTorchJob/TFJob's ``status.conditions`` to the job state, a pod's
phase, container state and conditions to per-rank facts, and Warning Events
to messages, so the monitor explains why a job is stuck.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import events as ev

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

#: Operator condition type -> our job state.
_CONDITION_STATES: dict[str, ev.JobState] = {
    "Created": "Pending",
    "Running": "Running",
    "Restarting": "Restarting",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
    "Suspended": "Pending",
}
#: Replica types that come first in rank order (node 0).
_LEADERS = ("master", "chief")


def job_condition(obj: dict[str, Any]) -> tuple[ev.JobState, str, str] | None:
    """The current state of a v1 job (its last true condition): (state, reason, message)."""
    conditions = [
        c
        for c in obj.get("status", {}).get("conditions") or []
        if str(c.get("status", "True")) == "True"
    ]
    if not conditions:
        return None
    last = conditions[-1]
    state = _CONDITION_STATES.get(str(last.get("type")), "Pending")
    return state, str(last.get("reason", "")), str(last.get("message", ""))


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


#: A JobSet pod's index in its Indexed Job (Kubeflow Trainer v2: the node rank).
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def node_index(pod: dict[str, Any], has_leader: bool) -> int:
    """Node number of a pod: the Master/Chief is node 0, Worker i is i+1 (or i without one).

    A TrainJob's pods are numbered by their Indexed Job's completion index.
    """
    labels = pod.get("metadata", {}).get("labels") or {}
    if COMPLETION_INDEX_LABEL in labels:
        return int(labels[COMPLETION_INDEX_LABEL])
    kind = str(labels.get(REPLICA_TYPE_LABEL, "worker")).lower()
    index = int(labels.get(REPLICA_INDEX_LABEL, "0"))
    if kind in _LEADERS:
        return index
    return index + 1 if has_leader else index


def pod_facts(pod: dict[str, Any], container: str, has_leader: bool) -> PodFacts:
    """Summarise a pod (as a JSON dict) for the ranks it runs."""
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    phase = str(status.get("phase", "Pending"))
    statuses = status.get("containerStatuses") or []
    cs = next((c for c in statuses if c.get("name") == container), statuses[0] if statuses else {})
    restarts = int(cs.get("restartCount", 0) or 0)
    state = cs.get("state") or {}
    reason, message, exit_code = "", "", None
    started = bool(cs.get("started")) or "running" in state or "terminated" in state or restarts > 0
    summary = phase
    if "waiting" in state and state["waiting"] is not None:
        waiting = state["waiting"]
        reason, message = str(waiting.get("reason", "")), str(waiting.get("message", ""))
        summary = "Restarting" if restarts and reason == "CrashLoopBackOff" else "Pending"
    elif "terminated" in state and state["terminated"] is not None:
        term = state["terminated"]
        exit_code = int(term.get("exitCode", 0))
        reason, message = str(term.get("reason", "")), str(term.get("message", "") or "")
        summary = "Succeeded" if exit_code == 0 else "Failed"
    elif "running" in state and state["running"] is not None:
        summary = "Running"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and str(cond.get("status")) == "False":
            reason = str(cond.get("reason", "Unschedulable"))
            message = str(cond.get("message", ""))
            summary = "Pending"
    return PodFacts(
        str(meta.get("name", "")),
        node_index(pod, has_leader),
        phase,
        summary,
        reason,
        message,
        exit_code,
        restarts,
        started,
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
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    found = next((c for c in statuses if c.get("name") == name), None)
    if found is None:
        return "", ""
    state, last = found.get("state") or {}, found.get("lastState") or {}
    for term in (state.get("terminated"), last.get("terminated")):
        if term and int(term.get("exitCode", 0)) != 0:
            return "failed", _last_word(str(term.get("message") or term.get("reason") or ""))
    if state.get("terminated"):
        return "done", ""
    return ("running", "") if state.get("running") else ("", "")


def _last_word(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith("distrain: ")]
    return (own or lines or ["exited with an error"])[-1].removeprefix("distrain: ")
