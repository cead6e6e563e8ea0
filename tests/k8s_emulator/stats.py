"""Request accounting: requests by (verb, resource), long-lived streams and TCP connections."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gauge:
    """How many were ever opened, are open now, and were open at once at most."""

    opened: int = 0
    current: int = 0
    peak: int = 0


@dataclass(frozen=True)
class Stats:
    """A snapshot of :meth:`Emulator.stats`.

    ``requests`` counts every request by (verb, resource): verbs are the API
    server's (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
    ``delete``, ``deletecollection``); resources are plurals with their
    subresource (``pytorchjobs``, ``pods/log``, ``pytorchjobs/status``), or
    ``discovery`` / ``version`` for the non-resource paths. ``watches`` and
    ``log_follows`` are the long-lived responses (``?watch=true``, logs with
    ``follow=true``), ``streams`` both together, ``connections`` TCP connections,
    ``port_forwards`` open ``pods/portforward`` WebSockets.
    """

    requests: dict[tuple[str, str], int] = field(default_factory=dict)
    watches: Gauge = Gauge()
    log_follows: Gauge = Gauge()
    streams: Gauge = Gauge()
    connections: Gauge = Gauge()
    port_forwards: Gauge = Gauge()

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        """Requests with this verb and/or resource."""
        return sum(
            n
            for (v, r), n in self.requests.items()
            if (verb is None or v == verb) and (resource is None or r == resource)
        )


class _Counter:
    def __init__(self) -> None:
        self.opened = self.current = self.peak = 0

    def open(self) -> None:
        self.opened += 1
        self.current += 1
        self.peak = max(self.peak, self.current)

    def close(self) -> None:
        self.current -= 1

    def gauge(self) -> Gauge:
        return Gauge(self.opened, self.current, self.peak)


class Accounting:
    """Thread-safe counters behind :class:`Stats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Zero the request counts and the ``opened``/``peak`` figures (open ones stay counted)."""
        with self._lock:
            self._requests: Counter[tuple[str, str]] = Counter()
            old = getattr(self, "_gauges", {})
            self._gauges = {
                name: _Counter() for name in ("watch", "log", "stream", "conn", "portforward")
            }
            for name, counter in self._gauges.items():
                counter.current = counter.peak = old[name].current if name in old else 0

    def request(self, verb: str, resource: str) -> None:
        with self._lock:
            self._requests[(verb, resource)] += 1

    def open(self, kind: str) -> None:
        with self._lock:
            self._gauges[kind].open()
            if kind in ("watch", "log"):
                self._gauges["stream"].open()

    def close(self, kind: str) -> None:
        with self._lock:
            self._gauges[kind].close()
            if kind in ("watch", "log"):
                self._gauges["stream"].close()

    def snapshot(self) -> Stats:
        with self._lock:
            g = self._gauges
            return Stats(
                dict(self._requests),
                g["watch"].gauge(),
                g["log"].gauge(),
                g["stream"].gauge(),
                g["conn"].gauge(),
                g["portforward"].gauge(),
            )
