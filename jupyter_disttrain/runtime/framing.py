"""Length-prefixed frames on a stream socket (standard library only).

A frame is a 4-byte big-endian length and that many bytes. A reader checks the length
against its limit before it reads the body, so a peer cannot make it buffer more.
Sessions and the debugger frame their messages this way; what a body holds and how it
is signed is theirs.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Final

HEADER: Final = struct.Struct(">I")


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Write one length-prefixed frame."""
    sock.sendall(HEADER.pack(len(body)) + body)


def recv_exact(
    sock: socket.socket, size: int, deadline: float | None = None, channel: str = "session"
) -> bytes:
    """Read exactly ``size`` bytes; :class:`ConnectionError` (naming the ``channel``) when the
    peer closed first or, with a ``deadline`` (a :func:`time.monotonic` time), was too slow."""
    chunks: list[bytes] = []
    left = size
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise ConnectionError(f"the {channel} connection sent too slowly")
            sock.settimeout(wait)
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except TimeoutError:
            raise ConnectionError(f"the {channel} connection sent too slowly") from None
        if not chunk:
            raise ConnectionError(f"the {channel} connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(
    sock: socket.socket, limit: int, deadline: float | None = None, channel: str = "session"
) -> bytes:
    """Read one frame of at most ``limit`` bytes (checked before its body is read)."""
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size, deadline, channel))
    if size > limit:
        raise ConnectionError(f"a {channel} frame of {size} bytes is over the limit of {limit}")
    return recv_exact(sock, size, deadline, channel)


def accept_each(
    listener: socket.socket,
    hellos: threading.BoundedSemaphore,
    handle: Callable[[socket.socket], None],
    name: str,
) -> None:
    """Accept connections until ``listener`` closes; each one that finds a free ``hellos``
    slot is handed to ``handle`` on a thread of its own (``handle`` releases the slot), the
    others are closed at once (a flood of connections cannot hold more threads)."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        if not hellos.acquire(blocking=False):
            conn.close()
            continue
        threading.Thread(target=handle, args=(conn,), name=name, daemon=True).start()
