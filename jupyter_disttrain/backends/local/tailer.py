"""Reading the ranks' and agents' log files as events, line by line as they grow."""

from __future__ import annotations

import time
from pathlib import Path

from ... import events as ev
from ...runtime import jobkey
from ..streams import line_events
from . import jobdir


def job_trust(directory: Path, nodes: int, nproc: int) -> ev.Trust | None:
    """What the lines of the job in ``directory`` are checked against; None without a key."""
    try:
        key = (directory / jobkey.KEY_FILE).read_bytes()
    except OSError:
        return None
    return ev.Trust.of(key, nodes, nproc) if len(key) == jobkey.KEY_BYTES else None


class LogTailer:
    """Reads new complete lines from a job's log files and turns them into events.

    A line is a control line only when it is signed with the job's key
    (``trust``) and its rank is the log's own (see :func:`.events.parse_line`).
    """

    def __init__(self, logs: Path, trust: ev.Trust | None) -> None:
        self.logs = logs
        self.trust = trust
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}
        self.ranks: set[int] = set()  # ranks whose log file exists
        self._new: list[tuple[int, float]] = []

    def new_ranks(self) -> list[tuple[int, float]]:
        """``(rank, t)`` for rank logs that appeared since the last call: the process started.

        ``t`` is the file's modification time when first seen (its creation
        time while it is empty), at most the time it was seen.
        """
        found, self._new = self._new, []
        return found

    def poll(self, final: bool = False) -> list[ev.Event]:
        """Events for lines written since the last poll (all remaining when ``final``)."""
        out: list[ev.Event] = []
        if not self.logs.is_dir():
            return out
        for path in sorted(self.logs.iterdir()):
            name = path.name
            match = jobdir.RANK_LOG_RE.match(name)
            if match is None and not name.startswith("agent-"):
                continue
            rank = int(match.group(1)) if match else None
            if rank is not None and rank not in self.ranks:
                self.ranks.add(rank)
                try:
                    self._new.append((rank, min(time.time(), path.stat().st_mtime)))
                except OSError:
                    self._new.append((rank, time.time()))
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(name, 0))
                    data = fh.read()
            except OSError:
                continue
            if not data and not (final and self.partial.get(name)):
                continue
            self.offsets[name] = self.offsets.get(name, 0) + len(data)
            data = self.partial.pop(name, b"") + data
            lines = data.split(b"\n")
            rest = lines.pop()
            if rest:
                if final:
                    lines.append(rest)
                else:
                    self.partial[name] = rest
            now = time.time()
            source = "" if rank is not None else name[: -len(".log")]
            for raw in lines:
                out.extend(line_events(raw, rank, self.trust, source=source, now=now))
        return out
