"""Container logs: the lines one container run wrote (stdout and stderr), with timestamps."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable


def rfc3339_nano(stamp: float) -> str:
    moment = dt.datetime.fromtimestamp(stamp, dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"


class ContainerLog:
    """Lines of one container run; readers can wait for more until the run ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: list[tuple[float, bytes]] = []
        self._closed = False
        self._listeners: list[Callable[[], None]] = []

    def append(self, line: bytes, stamp: float) -> None:
        with self._lock:
            self._lines.append((stamp, line))
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def extend(self, lines: list[bytes], stamp: float) -> None:
        """:meth:`append` of several lines at once (one wake-up for the readers)."""
        with self._lock:
            self._lines.extend((stamp, line) for line in lines)
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    @property
    def closed(self) -> bool:
        return self._closed

    def read(self, start: int) -> tuple[list[tuple[float, bytes]], bool]:
        """Lines from index ``start`` on, and whether the run has ended."""
        with self._lock:
            return self._lines[start:], self._closed

    def listen(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (from the writer's thread) on every new line and at the end."""
        with self._lock:
            self._listeners.append(listener)

        def stop() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return stop

    def text(self) -> str:
        """Everything so far, decoded (for tests and debugging)."""
        with self._lock:
            return b"".join(line for _, line in self._lines).decode(errors="replace")
