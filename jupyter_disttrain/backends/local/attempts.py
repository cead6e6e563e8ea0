"""Which attempt of a local job a rank's ``hello`` opens (pure).

torchrun starts a node's workers again in two ways. After a failure, the node's agent
counts a restart, and its workers' ``TORCHELASTIC_RESTART_COUNT`` (a hello's ``restart``)
goes up. When another node's agent comes back to a new rendezvous round, an agent whose
own workers still looked healthy restarts them too, as a membership change: torch does not
count that as a restart, so those workers say the count they said before. After one
failure, a node can thus start its workers again under count 0 while the failed node's
say 1: both are the job's next attempt, whichever hello is read first.
"""

from __future__ import annotations

from ... import events as ev


class Attempts:
    """The job's attempt as its ranks' hellos show it (0 until a restart)."""

    def __init__(self) -> None:
        self.current = 0
        self._greeted: set[int] = set()  # ranks whose hello the current attempt has heard

    def hello(self, rank: int | None, restart: int) -> int | None:
        """The attempt a hello of ``rank`` with restart count ``restart`` opens; None when it
        belongs to the current one. A new attempt opens at a higher count than any seen, or
        at a second hello of a rank in the same attempt (its node started it again)."""
        again = rank is not None and rank in self._greeted
        opened = None
        if restart > self.current or again:
            self.current = max(restart, self.current + 1)
            self._greeted.clear()
            opened = self.current
        if rank is not None:
            self._greeted.add(rank)
        return opened

    def restart(self, hello: ev.Event) -> ev.Event | None:
        """The ``restart`` event a rank's ``hello`` means, stamped now (as it is read), or
        None when the hello belongs to the current attempt."""
        opened = self.hello(hello.rank, int(hello.get("restart", 0)))
        if opened is None:
            return None
        return ev.restart_event(opened, "workers restarted by torchrun")
