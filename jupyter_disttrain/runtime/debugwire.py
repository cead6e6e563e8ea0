"""The debugger channel's wire: signed JSON frames between a rank and the notebook.

Standard library only. The channel is authenticated with the job key
(:mod:`.jobkey`), both ways:

* On connect the rank sends a signed JSON hello ``{"rank", "pid", "nonce"}``.
* The notebook must answer within :data:`HELLO_SECONDS`, in at most
  :data:`HELLO_LIMIT` bytes (size checked before reading), with a signed
  ``{"op": "hello", "nonce": NONCE}`` naming the rank's nonce.
* Every later frame is signed JSON carrying the nonce, its direction and a
  sequence number that must be the next one (:class:`Link`), so a frame cannot be
  replayed or reflected. Nothing is unpickled. Frames are 4-byte length-prefixed
  (:mod:`.framing`).
"""

from __future__ import annotations

import json
import socket
from typing import Any, Final

from . import framing, jobkey

HELLO_SECONDS: Final = 5.0
HELLO_LIMIT: Final = 64 << 10


def send(sock: socket.socket, key: bytes, message: dict[str, Any]) -> None:
    body = jobkey.signed(
        key, json.dumps(message, separators=(",", ":")).encode(), purpose="debugger"
    )
    framing.send_frame(sock, body)


def recv(
    sock: socket.socket, key: bytes, limit: int, deadline: float | None = None
) -> dict[str, Any]:
    """One signed JSON frame of at most ``limit`` bytes; ConnectionError unless ``key`` signed."""
    frame = framing.recv_frame(sock, limit, deadline, "debugger")
    try:
        body = jobkey.unsigned(key, frame, purpose="debugger")
        message = json.loads(body)
    except (jobkey.BadSignature, ValueError) as exc:
        raise ConnectionError(f"a debugger frame failed verification: {exc}") from None
    if not isinstance(message, dict):
        raise ConnectionError("a debugger frame must be a JSON object")
    return message


class Link:
    """One authenticated connection's numbering: every frame names the nonce, direction and
    the next sequence number (both sides use this class; ``side`` is ``rank`` or ``notebook``)."""

    def __init__(self, sock: socket.socket, key: bytes, nonce: str, side: str) -> None:
        self.sock, self.key, self.nonce, self.side = sock, key, nonce, side
        self.sent = 0
        self.received = 0

    def send(self, message: dict[str, Any]) -> None:
        """Send ``message`` with this link's nonce, direction and next number."""
        self.sent += 1
        send(
            self.sock, self.key, {**message, "nonce": self.nonce, "from": self.side, "n": self.sent}
        )

    def recv(self, limit: int, deadline: float | None = None) -> dict[str, Any]:
        """The next frame from the other side; ConnectionError for a replayed or foreign one."""
        message = recv(self.sock, self.key, limit, deadline)
        self.received += 1
        if (
            message.get("nonce") != self.nonce
            or message.get("from") == self.side
            or message.get("n") != self.received
        ):
            raise ConnectionError("a debugger frame is out of sequence (replayed or foreign)")
        return message
