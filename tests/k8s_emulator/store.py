"""Versioned object storage with a bounded event history and watch fan-out.

Every change gets the next ``resourceVersion`` (one counter for the whole
store, as etcd's revision) and becomes an :class:`Event` that is appended to
the history and handed to every listener while the store lock is held, so a
listener sees changes in resourceVersion order. Listeners must not block:
they queue the event for their own thread or IOLoop. A listener that raises
is logged and kept in :attr:`Store.listener_errors`; the writer and the other
listeners go on (one failing listener must not drop the event for the rest).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .meta import ApiError, Obj, deep

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True)
class Event:
    """One change: ``obj`` after it (its final state for DELETED), ``old`` before it."""

    rv: int
    type: str
    resource: str
    obj: Obj
    old: Obj | None

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace", ""))


Listener = Callable[[Event], None]


class Expired(ApiError):
    """The requested resourceVersion is older than the retained history (410 Gone)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(410, "Expired", f"too old resource version: {requested} ({oldest})")


class Store:
    """Objects by resource key, namespace and name; thread-safe."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._rv = 0
        self._history: deque[Event] = deque(maxlen=history)
        self._compacted = 0  # events with rv <= this are gone from the history
        self._listeners: list[Listener] = []
        #: The last exceptions listeners raised (each was logged, and the event went on).
        self.listener_errors: deque[str] = deque(maxlen=20)

    # --- reads ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self._objects.get(resource, {}).get((namespace, name))
            return deep(obj) if obj is not None else None

    def objects(self, resource: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        """Copies of the objects (in ``namespace``, or all), sorted by namespace/name."""
        with self.lock:
            items = [
                deep(obj)
                for (ns, _), obj in sorted(self._objects.get(resource, {}).items())
                if namespace is None or ns == namespace
            ]
            return items, self._rv

    def scan(self) -> Iterator[tuple[str, Obj]]:
        """Every stored object (not copied) with its resource key; hold :attr:`lock`."""
        for resource, objects in list(self._objects.items()):
            for obj in list(objects.values()):
                yield resource, obj

    # --- writes --------------------------------------------------------------------------

    def _publish(self, kind: str, resource: str, obj: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        event = Event(self._rv, kind, resource, deep(obj), old)
        self._history.append(event)
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv - 1
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as exc:  # neither the writer nor the other listeners lose it
                self.listener_errors.append(f"{event.type} {resource} rv {self._rv}: {exc!r}")
                log.exception("store listener %r failed on %s", listener, event.type)
        return deep(obj)

    def add(self, resource: str, obj: Obj) -> Obj:
        """Store a new object (the caller checked the name is free)."""
        meta = obj["metadata"]
        with self.lock:
            self._objects.setdefault(resource, {})[(meta.get("namespace", ""), meta["name"])] = obj
            return self._publish(ADDED, resource, obj, None)

    def put(self, resource: str, obj: Obj) -> Obj:
        """Replace a stored object with ``obj`` (same namespace and name)."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        with self.lock:
            objects = self._objects.setdefault(resource, {})
            old = objects.get(key)
            objects[key] = obj
            return self._publish(MODIFIED, resource, obj, deep(old) if old else None)

    def mutate(
        self, resource: str, namespace: str, name: str, change: Callable[[Obj], Any]
    ) -> Obj | None:
        """Apply ``change`` to a copy of the object; store it if it differs. None if missing."""
        with self.lock:
            current = self._objects.get(resource, {}).get((namespace, name))
            if current is None:
                return None
            updated = deep(current)
            change(updated)
            if updated == current:
                return deep(current)
            return self.put(resource, updated)

    def remove(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self._objects.get(resource, {}).pop((namespace, name), None)
            if obj is None:
                return None
            return self._publish(DELETED, resource, obj, deep(obj))

    # --- watch ---------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        with self.lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self.lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def watch(
        self, resource: str, namespace: str | None, since: int | None, listener: Listener
    ) -> tuple[list[Event], Callable[[], None]]:
        """Start a watch: the events to send first, and how to stop.

        ``since=None`` starts with a synthetic ADDED for every current object;
        otherwise every retained change after ``since`` is replayed (410 when
        the history no longer reaches back that far).
        """
        with self.lock:
            if since is None:
                items, _ = self.objects(resource, namespace)
                first = [
                    Event(int(o["metadata"]["resourceVersion"]), ADDED, resource, o, None)
                    for o in items
                ]
            else:
                if since < self._compacted:
                    raise Expired(since, self._compacted + 1)
                first = [
                    event
                    for event in self._history
                    if event.rv > since
                    and event.resource == resource
                    and (namespace is None or event.namespace == namespace)
                ]
            return first, self.subscribe(listener)

    def compact(self) -> None:
        """Forget the event history (watches resuming from an old resourceVersion get 410)."""
        with self.lock:
            self._history.clear()
            self._compacted = self._rv
