"""Signed requests the notebook leaves for a running job's ranks: pause them, set breakpoints.

Pure, standard library only. A request is one text value, ``N:BODY:TAG``:
``N`` its number (each new request has the next one), ``BODY`` what it asks,
``TAG`` the hex HMAC-SHA256 of ``N:BODY`` under the job key's ``control``
subkey. It lies in a file of the job directory named after the control
(local jobs) or in the annotation :func:`annotation` of node 0's pod
(Kubernetes: the kubelet writes it into the pod), where rank 0's watch reads
it and passes it on through the job's store (:mod:`.hangwatch`). A value
without a valid tag is ignored: only a holder of the job key asks anything.

Controls and their bodies:

* ``pause``: ``all`` or ranks ``1,5`` (:func:`ranks_body`).
* ``breaks``: the breakpoints of the running cell, a JSON list of
  ``{"line": L, "condition": C}`` (:func:`breaks_body`), replacing those it has.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from . import jobkey

PAUSE: Final = "pause"
BREAKS: Final = "breaks"
CONTROLS: Final = (PAUSE, BREAKS)
#: A pause body naming every rank.
ALL: Final = "all"
#: Longest body read (a bigger value is ignored).
MAX_BODY: Final = 64 << 10
#: Most breakpoints in one ``breaks`` body.
MAX_BREAKS: Final = 1000


def annotation(control: str) -> str:
    """The annotation of node 0's pod that carries ``control``'s requests."""
    return f"disttrain.jupyter.org/{control}"


def signature(key: bytes, signed_part: str) -> bytes:
    """The hex HMAC-SHA256 of ``N:BODY`` under job key ``key``'s ``control`` subkey."""
    data = signed_part.encode("utf-8", "replace")
    return hmac.new(jobkey.subkey(key, "control"), data, "sha256").hexdigest().encode("ascii")


def render(number: int, body: str, key: bytes) -> str:
    """Request ``number`` asking ``body``, signed with job key ``key``."""
    signed_part = f"{number}:{body}"
    return f"{signed_part}:{signature(key, signed_part).decode('ascii')}"


def parse(value: str, key: bytes) -> tuple[int, str] | None:
    """``(N, BODY)`` of a request signed with ``key``; None for anything else."""
    if len(value) > MAX_BODY + 128:
        return None
    signed_part, sep, tag = value.strip().rpartition(":")
    if not sep or not hmac.compare_digest(
        tag.encode("ascii", "replace"), signature(key, signed_part)
    ):
        return None
    number, sep, body = signed_part.partition(":")
    if not sep or not number.isdigit() or int(number) <= 0:
        return None
    return int(number), body


def number_of(value: str) -> int:
    """The number a stored request holds, unverified (0: none): the next request's is one more."""
    number = value.strip().partition(":")[0]
    return int(number) if number.isdigit() else 0


def ranks_body(ranks: Iterable[int] | None) -> str:
    """The ``pause`` body naming ``ranks`` (None: every rank)."""
    return ALL if ranks is None else ",".join(str(r) for r in sorted(set(ranks)))


def parse_ranks(body: str) -> tuple[bool, frozenset[int] | None]:
    """``(valid, ranks)`` of a ``pause`` body; ranks None means every rank."""
    if body == ALL:
        return True, None
    parts = body.split(",")
    if not body or len(parts) > 65536 or not all(p.isdigit() for p in parts):
        return False, None
    return True, frozenset(int(p) for p in parts)


def breaks_body(spots: Iterable[Mapping[str, Any]]) -> str:
    """The ``breaks`` body of breakpoints ``spots`` (``line``, optional ``condition``)."""
    listed = [{"line": int(s["line"]), "condition": s.get("condition") or None} for s in spots]
    return json.dumps(listed[:MAX_BREAKS], separators=(",", ":"))


def parse_breaks(body: str) -> list[dict[str, Any]] | None:
    """The breakpoints of a ``breaks`` body; None when it is not a list of them."""
    try:
        listed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(listed, list) or len(listed) > MAX_BREAKS:
        return None
    spots = []
    for spot in listed:
        if not isinstance(spot, dict) or type(spot.get("line")) is not int:
            return None
        condition = spot.get("condition")
        if condition is not None and not isinstance(condition, str):
            return None
        spots.append({"line": spot["line"], "condition": condition})
    return spots
