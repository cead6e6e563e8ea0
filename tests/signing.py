"""A job key for tests that read worker lines: the file workers sign with, the trust to check."""

from __future__ import annotations

from pathlib import Path

from jupyter_disttrain import events as ev
from jupyter_disttrain.runtime import jobkey

KEY = bytes(range(32))


def key_file(directory: Path) -> Path:
    """``directory/key`` holding :data:`KEY` (0600), for ``DISTRAIN_KEY_FILE``."""
    path = directory / jobkey.KEY_FILE
    path.write_bytes(KEY)
    path.chmod(0o600)
    return path


def trust(nodes: int = 1, nproc: int = 1) -> ev.Trust:
    """What lines signed with :data:`KEY` by a job of ``nodes`` x ``nproc`` are checked with."""
    return ev.Trust.of(KEY, nodes, nproc)


def parse(line: str, rank: int | None, nodes: int = 1, nproc: int = 8) -> ev.Event:
    """``line`` read from ``rank``'s stream of a job signed with :data:`KEY`."""
    return ev.parse_line(line, rank, trust=trust(nodes, nproc))


def line(kind: str, rank: int | None, **fields: object) -> str:
    """A protocol line signed with :data:`KEY`."""
    from jupyter_disttrain.runtime.protocol import encode

    return encode(kind, rank, sign_with=KEY, **fields)
