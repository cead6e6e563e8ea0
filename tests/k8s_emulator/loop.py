"""A controller's work queue and thread, as controller-runtime gives one.

Keys (``(namespace, name)``) are queued from store events (deduplicated while
waiting), reconciled one at a time on the loop's thread, and may be queued
again after a delay (``RequeueAfter``, or a back-off after an error; a key
waits once, for the earliest of its delays, as client-go's delaying queue
keeps it). Every
``resync`` seconds :meth:`ControlLoop.resync` may queue keys of its own.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time

from .apiserver import ApiServer
from .meta import ApiError, Obj
from .store import Event

log = logging.getLogger(__name__)

Key = tuple[str, str]

#: Back-off after a failed reconcile: first delay, doubling up to the cap (seconds).
ERROR_BACKOFF = (0.2, 5.0)


class RetryLater(Exception):
    """A reconcile could not finish (a dependency is missing): try again with back-off."""


class ControlLoop:
    """One controller: :meth:`keys_for` maps store events to keys, :meth:`reconcile` acts."""

    #: Thread name, and the component of the Events it records.
    name = "controller"

    def __init__(self, api: ApiServer, resync: float = 0.5) -> None:
        self.api = api
        self._resync = resync
        self._cond = threading.Condition()
        self._ready: list[Key] = []
        self._queued: set[Key] = set()
        self._delayed: list[tuple[float, int, Key]] = []
        self._due: dict[Key, float] = {}  # each delayed key's one time (older entries: stale)
        self._counter = itertools.count()
        self._failures: dict[Key, int] = {}
        self._closed = False
        self._unsubscribe = api.store.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    # --- subclass API --------------------------------------------------------------------

    def keys_for(self, event: Event) -> list[Key]:
        """The keys a store event concerns (called with the store lock held: no blocking)."""
        return []

    def reconcile(self, key: Key) -> float | None:
        """Bring ``key`` to its desired state; a number asks to be called again after it."""
        return None

    def resync(self) -> list[Key]:
        """Keys to look at again every ``resync`` seconds."""
        return []

    # --- queue ---------------------------------------------------------------------------

    def enqueue(self, key: Key, after: float = 0.0) -> None:
        with self._cond:
            if after > 0:
                due = time.monotonic() + after
                if self._due.get(key, due + 1) <= due:
                    return  # it waits already, for as long or less
                self._due[key] = due
                heapq.heappush(self._delayed, (due, next(self._counter), key))
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
            self._cond.notify()

    def _on_event(self, event: Event) -> None:
        for key in self.keys_for(event):
            self.enqueue(key)

    def close(self) -> None:
        self._unsubscribe()
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def _next(self) -> Key | None:
        with self._cond:
            next_resync = time.monotonic() + self._resync
            while not self._closed:
                now = time.monotonic()
                while self._delayed and self._delayed[0][0] <= now:
                    due, _, key = heapq.heappop(self._delayed)
                    if self._due.get(key) != due:
                        continue  # a later entry of a key that waited for an earlier time
                    del self._due[key]
                    if key not in self._queued:
                        self._queued.add(key)
                        self._ready.append(key)
                if self._ready:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    return key
                if now >= next_resync:
                    return ("", "")  # time to resync
                wake = next_resync
                if self._delayed:
                    wake = min(wake, self._delayed[0][0])
                self._cond.wait(max(0.0, wake - now))
            return None

    def _run(self) -> None:
        while True:
            key = self._next()
            if key is None:
                return
            if key == ("", ""):
                try:
                    for item in self.resync():
                        self.enqueue(item)
                except Exception:
                    log.exception("%s: resync failed", self.name)
                continue
            try:
                after = self.reconcile(key)
            except (ApiError, RetryLater) as exc:
                failures = self._failures.get(key, 0)
                self._failures[key] = failures + 1
                first, cap = ERROR_BACKOFF
                self.enqueue(key, min(cap, first * 2**failures))
                log.debug("%s: reconcile %s/%s: %s", self.name, *key, exc)
                continue
            except Exception:
                log.exception("%s: reconcile %s/%s failed", self.name, *key)
                self.enqueue(key, ERROR_BACKOFF[1])
                continue
            self._failures.pop(key, None)
            if after is not None:
                self.enqueue(key, max(after, 0.01))


def controller_of(obj: Obj, kind: str) -> Obj | None:
    """The ``ownerReferences`` entry of ``obj``'s controller when it is a ``kind``."""
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref.get("controller") and ref.get("kind") == kind:
            return dict(ref)
    return None


def owner_ref(owner: Obj, *, block: bool = True) -> Obj:
    """A controller ``ownerReference`` to ``owner`` (as ``SetControllerReference`` makes)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }
