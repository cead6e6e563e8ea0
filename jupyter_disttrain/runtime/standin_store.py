"""The stand-in's store requests, counted: what the job's c10d store serves at scale.

The stand-in (:mod:`.standin`) wraps rank 0's store and every node's store
connection in a :class:`CountedStore`; :class:`StoreTally` writes the requests
per second of each side to node 0's log every :data:`EVERY` seconds, as one plain
line (``distrain-standin: store {...}``, JSON) that the scale benchmark reads. A
request is one call on the wire: ``multi_get`` of 64 keys is one. Standard library only.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

#: Seconds between two lines of counts.
EVERY: Final = 5.0
#: How the line of counts starts in node 0's log.
MARK: Final = "distrain-standin: store "


class CountedStore:
    """``store`` with every method call counted in ``counts`` (by method name)."""

    def __init__(self, store: Any, counts: Counter[str], lock: threading.Lock) -> None:
        self._store = store
        self._counts = counts
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if not callable(method):
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._counts[name] += 1
            return method(*args, **kwargs)

        return counted


class StoreTally:
    """Requests of rank 0 (the relay's reader, the hang watch) and of the senders."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rank0: Counter[str] = Counter()
        self.senders: Counter[str] = Counter()
        self._last: tuple[float, Counter[str], Counter[str]] | None = None

    def rank0_store(self, store: Any) -> CountedStore:
        return CountedStore(store, self.rank0, self.lock)

    def sender_store(self, store: Any) -> CountedStore:
        return CountedStore(store, self.senders, self.lock)

    def line(self, now: float | None = None) -> str | None:
        """The line of requests per second since the last call (None at the first)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            rank0, senders = Counter(self.rank0), Counter(self.senders)
        last, self._last = self._last, (now, rank0, senders)
        if last is None or now <= last[0]:
            return None
        seconds = now - last[0]

        def rates(counts: Counter[str], before: Counter[str]) -> dict[str, float]:
            return {op: round((n - before[op]) / seconds, 1) for op, n in sorted(counts.items())}

        by_op0, by_op = rates(rank0, last[1]), rates(senders, last[2])
        fields = {
            "seconds": round(seconds, 2),
            "rank0_per_s": round(sum(by_op0.values()), 1),
            "senders_per_s": round(sum(by_op.values()), 1),
            "rank0_by_op": by_op0,
            "senders_by_op": by_op,
        }
        return MARK + json.dumps(fields, separators=(",", ":"))

    def every(self, say: Callable[[str], None], stop: threading.Event) -> threading.Thread:
        """Start a thread that says :meth:`line` every :data:`EVERY` seconds until ``stop``."""

        def run() -> None:
            self.line()
            while not stop.wait(EVERY):
                text = self.line()
                if text is not None:
                    say(text)

        thread = threading.Thread(target=run, name="standin-store-tally", daemon=True)
        thread.start()
        return thread
