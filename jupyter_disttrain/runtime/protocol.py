"""The worker -> notebook line protocol, worker side (stdlib only).

A structured line is ``##distrain {"v":1,"kind":KIND,"rank":R,"t":T, ...} SIGNATURE``:
the JSON body, one space, and the hex HMAC-SHA256 of the body's bytes under
the job key's ``line`` subkey (:mod:`.jobkey`). A line without a valid signature is plain
log text to the notebook, whatever it looks like. Every other line a worker
prints is a plain log line. The notebook side parses these lines in
:mod:`jupyter_disttrain.events`.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from . import jobkey

PREFIX = "##distrain "
VERSION = 1
KINDS = (
    "hello",
    "metric",
    "checkpoint",
    "result",
    "error",
    "done",
    "stacks",
    "staging",
    "resources",
    "progress",
    "session",
    "cell",
    "paused",
    "resumed",
    "loaded",
)
#: Kinds a rank sends on a clock of its own: no sign of activity (hang detection, "heard").
QUIET_KINDS = ("resources",)
#: How a quiet kind's line starts (:func:`encode` writes ``v`` and ``kind`` first).
QUIET_MARKERS = tuple(f'{PREFIX}{{"v":{VERSION},"kind":"{k}"'.encode() for k in QUIET_KINDS)
#: Length of a line's signature (hex SHA-256).
SIGNATURE_CHARS = jobkey.SIGNATURE_CHARS
#: Deepest nesting of arrays and objects a line's body may have (the protocol's own lines
#: nest four deep; JSON's decoder recurses once per level).
MAX_DEPTH = 32
#: A JSON string (skipped whole) or one bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def encode(
    kind: str, rank: int | None, *, sign_with: bytes | jobkey.Signer | None = None, **fields: Any
) -> str:
    """One protocol line (no trailing newline) for ``kind`` from ``rank`` (None: job-wide).

    Signed with the job key ``sign_with``; without a key the line carries no
    signature (and so is log text to the notebook).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown protocol kind {kind!r}")
    body = {"v": VERSION, "kind": kind, "rank": rank, "t": round(time.time(), 6)}
    body.update(fields)
    text = json.dumps(body, separators=(",", ":"), allow_nan=True)
    if sign_with is None:
        return PREFIX + text
    if isinstance(sign_with, bytes):
        sign_with = jobkey.Signer(sign_with)
    return f"{PREFIX}{text} {sign_with.sign(text.encode())}"


def signed_body(text: str, key: bytes | jobkey.Signer) -> str | None:
    """The JSON body of the protocol line in ``text`` when ``key`` signed it; else None.

    ``text`` may hold anything before the prefix (a launcher's line prefix), and
    any characters at all: a signature is checked only when it is 64 lowercase
    hex digits, and a body that cannot be encoded (a lone surrogate) is not signed.
    """
    start = text.find(PREFIX)
    if start == -1:
        return None
    rest = text[start + len(PREFIX) :].rstrip("\r\n")
    body, _, signature = rest.rpartition(" ")
    if not body or len(signature) != SIGNATURE_CHARS:
        return None
    try:
        data = body.encode()
    except UnicodeEncodeError:
        return None
    signer = jobkey.Signer(key) if isinstance(key, bytes) else key
    if not signer.verify(data, signature):  # checks the signature's form first
        return None
    return body


def too_deep(body: str, limit: int = MAX_DEPTH) -> bool:
    """True when ``body`` nests arrays and objects deeper than ``limit`` (read in linear time,
    strings skipped, before a decoder could recurse on it)."""
    if body.count("[") + body.count("{") <= limit:
        return False
    depth = 0
    for token in _TOKENS.finditer(body):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def decode(body: str) -> tuple[dict[str, Any] | None, str]:
    """The fields of a line's JSON body, or None and why it cannot be read (never raises)."""
    if too_deep(body):
        return None, f"the line's body nests deeper than {MAX_DEPTH} levels"
    try:
        fields = json.loads(body)
    except (ValueError, RecursionError):
        return None, "the line's body is not JSON"
    if not isinstance(fields, dict):
        return None, "the line's body is not a JSON object"
    return fields, ""


def signed_fields(line: str, signer: jobkey.Signer | None) -> dict[str, Any] | None:
    """The fields of the protocol line in ``line`` when ``signer``'s key signed it, else None
    (for the rank's own readers of its lines: metrics, ``trainerStatus``)."""
    if signer is None:
        return None
    body = signed_body(line, signer)
    return None if body is None else decode(body)[0]


def is_signed(text: str, signer: jobkey.Signer) -> bool:
    """True when ``text`` holds a protocol line ``signer``'s key signed (the job's own)."""
    return PREFIX in text and signed_body(text, signer) is not None


def is_quiet(line: bytes) -> bool:
    """True when ``line`` holds a protocol line of a quiet kind (see :data:`QUIET_KINDS`)."""
    return any(marker in line for marker in QUIET_MARKERS)
