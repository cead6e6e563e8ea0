"""The API server's Events, recorded as client-go's recorder does.

A repeat bumps ``count``; the recorder's spam filter (a token bucket per
source and object) drops Events beyond a burst.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .meta import Obj, now
from .resources import EVENTS
from .store import Store

#: client-go's event spam filter: Events one source may report about one object at once...
EVENT_BURST = 25
#: ...and how often one more is allowed after that.
EVENT_REFILL_SECONDS = 300.0


class EventRecorder:
    """``record_event`` of :class:`~.apiserver.ApiServer` (mixed into it).

    Uses the server's ``store``, ``mutate`` and ``_stamp``.
    """

    store: Store

    def __init__(self) -> None:
        self._spam_filter = SpamFilter(EVENT_BURST, EVENT_REFILL_SECONDS)
        self._events: dict[tuple[Any, ...], str] = {}  # repeat key -> Event name

    # --- events --------------------------------------------------------------------------

    def record_event(
        self,
        involved: Obj,
        event_type: str,
        reason: str,
        message: str,
        component: str,
        *,
        host: str | None = None,
        field_path: str | None = None,
    ) -> Obj | None:
        """Record an Event about ``involved`` the way client-go's recorder does.

        A repeat (same object, type, reason, message, source) bumps the
        ``count`` of the existing Event. The recorder's spam filter applies:
        each source may report :data:`EVENT_BURST` Events about one object,
        then one per :data:`EVENT_REFILL_SECONDS`; the others are dropped
        (None is returned).
        """
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        spam_key = (component, host, involved.get("kind"), namespace, meta["name"], meta.get("uid"))
        if not self._spam_filter.allow(spam_key):
            return None
        ref = {
            "kind": involved.get("kind"),
            "namespace": namespace,
            "name": meta["name"],
            "uid": meta.get("uid"),
            "apiVersion": involved.get("apiVersion"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        if field_path:
            ref["fieldPath"] = field_path
        stamp = now()
        key = (*spam_key, field_path, event_type, reason, message)
        with self.store.lock:
            existing = self._events.get(key)
            if existing is not None:

                def bump(event: Obj) -> None:
                    event["count"] = event.get("count", 1) + 1
                    event["lastTimestamp"] = stamp

                bumped = self.mutate(EVENTS, namespace, existing, bump)
                if bumped is not None:
                    return bumped
            source = {"component": component, **({"host": host} if host else {})}
            name = f"{meta['name']}.{time.time_ns():x}"
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "source": source,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "type": event_type,
                "eventTime": None,
                "reportingComponent": component,
                "reportingInstance": host or "",
            }
            self._stamp(EVENTS, event)
            self._events[key] = name
            return self.store.add(EVENTS.key, event)


class SpamFilter:
    """A token bucket per key: ``burst`` tokens, refilled at one per ``refill`` seconds."""

    def __init__(self, burst: int, refill: float) -> None:
        self.burst, self.refill = burst, refill
        self._buckets: dict[Any, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: Any) -> bool:
        with self._lock:
            clock = time.monotonic()
            tokens, last = self._buckets.get(key, (float(self.burst), clock))
            tokens = min(float(self.burst), tokens + (clock - last) / self.refill)
            if tokens < 1:
                self._buckets[key] = (tokens, clock)
                return False
            self._buckets[key] = (tokens - 1, clock)
            return True
