"""Kubernetes objects -> start-up phase facts (pure): queued, scheduled, image, started.

Pods and their Events say where each pod is between its job's creation and
its training container's start: the pod exists (``queued`` done), ``Scheduled``
/ ``FailedScheduling`` (``scheduled``), ``Pulling`` / ``Pulled`` / image pull
failures and init containers (``image``), ``Started`` (``started``). Kueue's
Events on the job say why it is still queued. Each fact is
``(phase, state, message, stamp)``; :func:`observed_at` picks its time.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, NamedTuple

#: How much older than its arrival an object's (whole-second) timestamp must be to be
#: believed over the arrival time: a fact that arrives live is timed by its arrival.
REPLAYED_AFTER = 2.0
#: Longest message kept in a fact (an image pull error can be long).
MAX_MESSAGE = 240


class Fact(NamedTuple):
    """A pod (or the job) reached (``done``) or waits in (``waiting``) a phase."""

    phase: str
    state: Literal["waiting", "done"]
    message: str
    stamp: Any  # the object's RFC 3339 time of the fact, if it has one


def observed_at(stamp: Any, arrived: float) -> float:
    """When a fact happened: its timestamp if it is clearly older than ``arrived`` (a replay
    after attaching), else ``arrived`` (Kubernetes timestamps are whole seconds)."""
    if not stamp:
        return arrived
    try:
        t = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return arrived
    return t if arrived - t >= REPLAYED_AFTER else arrived


def pod_facts(pod: dict[str, Any], container: str) -> list[Fact]:
    """What a pod object says: it exists, is (un)scheduled, cannot pull, has started."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    name = str(meta.get("name", ""))
    out = [Fact("queued", "done", f"pod {name} created", meta.get("creationTimestamp"))]
    for cond in status.get("conditions") or []:
        if cond.get("type") != "PodScheduled":
            continue
        if str(cond.get("status")) == "True":
            out.append(Fact("scheduled", "done", "", cond.get("lastTransitionTime")))
        else:
            why = str(cond.get("message") or cond.get("reason") or "unschedulable")
            out.append(Fact("scheduled", "waiting", _cut(f"pod {name} unschedulable: {why}"), None))
    statuses = status.get("containerStatuses") or []
    cs = next((c for c in statuses if c.get("name") == container), None) or {}
    state = cs.get("state") or {}
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
        text = f"pod {name} {waiting['reason']}: {waiting.get('message', '')}"
        out.append(Fact("image", "waiting", _cut(text), None))
    running, ended = state.get("running") or {}, state.get("terminated") or {}
    if running or ended or cs.get("started") or int(cs.get("restartCount") or 0) > 0:
        out.append(Fact("started", "done", "", running.get("startedAt") or ended.get("startedAt")))
    return out


def event_fact(event: dict[str, Any], container: str) -> Fact | None:
    """The phase fact of a pod's Event (kubelet, scheduler), or None."""
    involved = event.get("involvedObject") or {}
    if involved.get("kind") != "Pod":
        return None
    pod = str(involved.get("name", ""))
    reason, message = str(event.get("reason", "")), str(event.get("message", ""))
    path = str(involved.get("fieldPath", ""))
    own = path == f"spec.containers{{{container}}}"
    init = path.startswith("spec.initContainers{")
    stamp = event.get("eventTime") or event.get("lastTimestamp") or event.get("firstTimestamp")
    said = f"pod {pod} " + message[:1].lower() + message[1:]
    if reason == "Scheduled":
        return Fact("scheduled", "done", message, event.get("firstTimestamp") or stamp)
    if reason == "FailedScheduling":
        return Fact("scheduled", "waiting", _cut(f"pod {pod} unschedulable: {message}"), stamp)
    if reason == "Pulling" and (own or init):
        return Fact("image", "waiting", _cut(said), stamp)
    if reason == "Pulled" and own:
        return Fact("image", "done", message, event.get("firstTimestamp") or stamp)
    if reason in ("Failed", "BackOff") and "image" in message.lower() and (own or init):
        return Fact("image", "waiting", _cut(said), stamp)
    if reason == "Started" and init:
        name = path[len("spec.initContainers{") : -1]
        return Fact("image", "waiting", f"pod {pod} running init container {name}", stamp)
    if reason == "Started" and own:
        return Fact("started", "done", message, event.get("firstTimestamp") or stamp)
    return None


def queue_fact(event: dict[str, Any]) -> Fact | None:
    """What Kueue's Event on the job says while it is queued (``waiting`` only), or None."""
    reason, message = str(event.get("reason", "")), str(event.get("message", ""))
    stamp = event.get("lastTimestamp")
    if reason == "CreatedWorkload":
        return Fact("queued", "waiting", f"queued in Kueue ({message})", stamp)
    if reason == "Started" and message.startswith("Admitted"):
        return Fact("queued", "waiting", f"{message}; the pods are being created", stamp)
    if reason == "Stopped":
        return Fact("queued", "waiting", _cut(f"evicted by Kueue: {message}"), stamp)
    return None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
