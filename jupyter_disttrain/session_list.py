"""This process's sessions by name (:class:`Sessions`) and their listing as a table."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from .sessions import Session, SessionError


class Sessions:
    """This process's sessions by name."""

    def __init__(self) -> None:
        self._by_name: dict[str, Session] = {}
        self._lock = threading.Lock()

    def add(self, session: Session) -> Session:
        """Keep ``session``; :class:`SessionError` when a live one has its name."""
        with self._lock:
            old = self._by_name.get(session.name)
            if old is not None and old.alive:
                raise SessionError(
                    f"session {session.name} is already running; stop it with %distrain_session "
                    f"stop {session.name}, restart it, or choose another name"
                )
            self._by_name[session.name] = session
        return session

    def start(self, session: Session) -> Session:
        """Keep ``session`` (as :meth:`add`) and start it; forgotten again if it does not start."""
        self.add(session)
        try:
            session.start()
        except BaseException:
            self.remove(session.name)
            raise
        return session

    def stop(self, name: str) -> str:
        """Stop session ``name`` and forget it; the job's final state."""
        session = self.get(name)
        try:
            return session.stop()
        finally:
            self.remove(name)

    def get(self, name: str) -> Session:
        """The session called ``name``; :class:`SessionError` naming the known ones."""
        with self._lock:
            found = self._by_name.get(name)
            known = sorted(self._by_name)
        if found is None:
            listing = f"this kernel's sessions: {', '.join(known)}" if known else "none is running"
            raise SessionError(
                f"no session named {name!r} ({listing}); start one with %distrain_session start "
                f"{name} --nodes N --nproc M; a session that outlived the kernel that started "
                f"it (on a cluster) ends with %distrain_stop {name}"
            )
        return found

    def all(self) -> list[Session]:
        """Every session of this process, oldest first."""
        with self._lock:
            return list(self._by_name.values())

    def remove(self, name: str) -> None:
        """Forget session ``name`` (stop it first)."""
        with self._lock:
            self._by_name.pop(name, None)

    def stop_all(self) -> None:
        """Owner shutting down: stop every session whose backend's jobs end with the kernel;
        detach from the others (``Capabilities.survives_kernel``: they run on)."""
        for session in self.all():
            try:
                if session.backend.capabilities.survives_kernel:
                    session.detach()
                else:
                    session.stop(timeout=10.0)
            except Exception:  # one session's failure must not keep the others running
                continue


def format_sessions(sessions: Iterable[Session]) -> str:
    """A plain-text table of sessions: name, backend, ranks, state, cells, idle time."""
    rows = [("NAME", "BACKEND", "RANKS", "STATE", "CELLS", "RESTARTS", "IDLE")]
    now = time.time()
    for s in sessions:
        idle = "-" if s.status() == "busy" else f"{now - s.last_used:.0f} s"
        rows.append(
            (
                s.name,
                s.backend.name,
                f"{s.spec.nodes}x{s.spec.nproc}",
                s.status(),
                str(s.cells),
                str(s.restarts),
                idle,
            )
        )
    if len(rows) == 1:
        return "no sessions (start one with %distrain_session start NAME --nodes N --nproc M)"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
