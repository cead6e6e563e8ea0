"""StackBook: the ranks' stacks by request and when a rank last wrote (the hang part).

Owns the stacks each rank sent per request (newest request last, at most
:data:`MAX_STACK_REQUESTS`), when each request's first stacks arrived, and
the time of the ranks' newest output. Answers which request (if any) is a
hang still going on; which ranks are up is the rank rows' fact, so callers
pass it in. Pure; the monitor calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..events import StacksFields

#: Seconds a hang's stacks may take to arrive from every rank before it is read with some.
HANG_GATHER = 8.0
#: Stack requests kept per job (the oldest is dropped first).
MAX_STACK_REQUESTS = 8


class StackBook:
    """Stacks by request and rank, and the newest output time that ends a hang."""

    def __init__(self) -> None:
        self._stacks: dict[str, dict[int, StacksFields]] = {}
        self._first_t: dict[str, float] = {}
        self._output_t: float | None = None

    def add(self, request: str, rank: int, fields: StacksFields, t: float) -> None:
        """``rank``'s stacks for ``request`` (a copy relayed by rank 0 again is ignored)."""
        seen = self._stacks.setdefault(request, {})
        self._first_t.setdefault(request, t)
        seen.setdefault(rank, fields)
        while len(self._stacks) > MAX_STACK_REQUESTS:
            oldest = next(iter(self._stacks))
            del self._stacks[oldest], self._first_t[oldest]

    def wrote(self, t: float) -> None:
        """A rank wrote something at ``t`` (a hang seen before then is over)."""
        if self._output_t is None or t > self._output_t:
            self._output_t = t

    def newest(self) -> str | None:
        """The newest request that has stacks."""
        return next(reversed(self._stacks), None)

    def of(self, request: str) -> dict[int, StacksFields] | None:
        """The stacks of ``request`` by rank (the book's own mapping: read only), or None."""
        return self._stacks.get(request)

    def complete(self, request: str, up: Collection[int]) -> bool:
        """Every rank of ``up`` sent its stacks for ``request`` (and some rank did)."""
        seen = self._stacks.get(request, {})
        return bool(seen) and all(rank in seen for rank in up)

    def hang(self, now: float, up: Callable[[], Collection[int]]) -> str | None:
        """The newest hang request while no rank wrote since its stacks; else None.

        ``up`` gives the ranks still up; until all of them answered, a hang is
        read only after :data:`HANG_GATHER` seconds (rank 0 relays the others').
        """
        for request in reversed(self._stacks):
            if request.startswith("h"):
                first = self._first_t[request]
                if self._output_t is not None and self._output_t > first:
                    return None
                if not self.complete(request, up()) and now - first < HANG_GATHER:
                    return None
                return request
        return None
