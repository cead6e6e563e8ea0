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
from collections.abc import Callable
from typing import Any, TypeVar

from . import jobkey

#: What :func:`_runs` cuts into runs.
_Item = TypeVar("_Item")

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
    "relayed",
)
#: Kinds a rank sends on a clock of its own: no sign of activity (hang detection, "heard").
QUIET_KINDS = ("resources",)
#: Kinds rank 0 writes many of in one ``relayed`` line when it relays them for other ranks
#: (the frequent ones); a line of any other kind is relayed as it was signed.
BATCHED_KINDS = ("metric", "progress", "resources")
#: Longest body of a ``relayed`` line, in characters: well below the 16 KiB at which
#: container runtimes split a log line.
RELAYED_CHARS = 12 * 1024
#: How a line of ``kind`` starts (:func:`encode` writes ``v`` and ``kind`` first).
_STARTS = {kind: f'{PREFIX}{{"v":{VERSION},"kind":"{kind}"' for kind in KINDS}
#: How a quiet line starts: a quiet kind's, or a ``relayed`` line of quiet lines only.
QUIET_MARKERS = (
    *(_STARTS[kind].encode() for kind in QUIET_KINDS),
    (_STARTS["relayed"] + ',"quiet":true').encode(),
)
#: A metric line as :func:`encode` writes it: its rank and step (read without decoding).
_METRIC_STEP = re.compile(
    re.escape(_STARTS["metric"]) + r',"rank":(-?\d+),"t":[^,]*,"step":(-?\d+)[,}]'
)
#: A metric line's body as :func:`encode` writes it when ``step`` and a flat ``values``
#: are its only fields: its rank, time, step and values texts (read without decoding).
_METRIC_BODY = re.compile(
    re.escape(_STARTS["metric"][len(PREFIX) :])
    + r',"rank":(\d+),"t":([-+.eE0-9]+),"step":(-?\d+),"values":(\{[^{}]*\})\}'
)
#: Length of a line's signature (hex SHA-256).
SIGNATURE_CHARS = jobkey.SIGNATURE_CHARS
#: Deepest nesting of arrays and objects a line's body may have (the protocol's own lines
#: nest four deep; JSON's decoder recurses once per level).
MAX_DEPTH = 32


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


def relayed(lines: list[str], signer: jobkey.Signer, t: float | None = None) -> list[str]:
    """``lines`` (protocol lines other ranks signed, in order) as rank 0 writes them.

    Each stretch of lines of :data:`BATCHED_KINDS` becomes ``relayed`` lines of rank 0,
    signed with ``signer``, up to :data:`RELAYED_CHARS` a line, so the notebook checks
    one signature and decodes one document for many lines. A run of metric lines as
    :func:`encode` writes them (``step`` and a flat ``values`` their only fields) is carried
    as columns, their texts unchanged:
    ``{"v":1,"kind":"relayed","quiet":false,"rank":0,"t":T,"metrics":{"rank":[R, ...],
    "t":[T, ...],"step":[S, ...],"values":[VALUES, ...]}}``; any other line of the stretch
    as its body, unchanged (``..."lines":[BODY, ...]}``). A line carries one or the other,
    in the order they came. A quiet line and a loud one never share a line (``quiet`` is
    true for quiet lines only): a stretch's loud lines are written first, in order, then
    its quiet ones (ranks' resource samples between their metrics would otherwise cut it
    into many short lines). Any other line, and a body too long to share a line, is
    written as it was signed, where it came.
    """
    out: list[str] = []
    loud: list[str] = []
    quiet: list[str] = []
    stamp = round(time.time() if t is None else t, 6)

    def close_stretch() -> None:
        out.extend(_loud_lines(loud, stamp, signer))
        out.extend(_relayed_lines(quiet, True, stamp, signer))
        loud.clear()
        quiet.clear()

    for line in lines:
        kind, body = _batched(line)
        if not kind or len(body) > RELAYED_CHARS // 2:
            close_stretch()
            out.append(line)
        else:
            (quiet if kind in QUIET_KINDS else loud).append(body)
    close_stretch()
    return out


def _loud_lines(bodies: list[str], stamp: float, signer: jobkey.Signer) -> list[str]:
    """``bodies`` (loud, in order) as signed ``relayed`` lines: each run of metric bodies
    :data:`_METRIC_BODY` reads as columns, each run of other bodies as they are."""
    out: list[str] = []
    others: list[str] = []
    metrics: list[tuple[str, ...]] = []
    for body in bodies:
        match = _METRIC_BODY.fullmatch(body)
        if match is None:
            out.extend(_metric_lines(metrics, stamp, signer))
            metrics.clear()
            others.append(body)
        else:
            out.extend(_relayed_lines(others, False, stamp, signer))
            others.clear()
            metrics.append(match.groups())
    out.extend(_metric_lines(metrics, stamp, signer))
    out.extend(_relayed_lines(others, False, stamp, signer))
    return out


def _metric_lines(metrics: list[tuple[str, ...]], stamp: float, signer: jobkey.Signer) -> list[str]:
    """Metric lines' ``(rank, t, step, values)`` texts as signed ``relayed`` lines of
    columns, at most :data:`RELAYED_CHARS` each."""
    out: list[str] = []
    for run in _runs(metrics, lambda parts: sum(map(len, parts)) + 4):
        ranks, times, steps, values = (",".join(column) for column in zip(*run, strict=True))
        columns = f'"rank":[{ranks}],"t":[{times}],"step":[{steps}],"values":[{values}]'
        out.append(_signed_relayed(f'"metrics":{{{columns}}}', False, stamp, signer))
    return out


def _relayed_lines(
    bodies: list[str], quiet: bool, stamp: float, signer: jobkey.Signer
) -> list[str]:
    """``bodies`` as signed ``relayed`` lines of at most :data:`RELAYED_CHARS` each."""
    return [
        _signed_relayed(f'"lines":[{",".join(run)}]', quiet, stamp, signer)
        for run in _runs(bodies, lambda body: len(body) + 1)
    ]


def _runs(items: list[_Item], weight: Callable[[_Item], int]) -> list[list[_Item]]:
    """``items`` cut, in order, into runs whose weights add up to :data:`RELAYED_CHARS` at
    most (an item heavier than that alone is a run of its own)."""
    runs: list[list[_Item]] = []
    size = 0
    for item in items:
        heft = weight(item)
        if runs and size + heft <= RELAYED_CHARS:
            runs[-1].append(item)
            size += heft
        else:
            runs.append([item])
            size = heft
    return runs


def _signed_relayed(carried: str, quiet: bool, stamp: float, signer: jobkey.Signer) -> str:
    """A ``relayed`` line of rank 0 at ``stamp`` carrying ``carried`` (its last field's
    JSON text), signed."""
    text = (
        f'{{"v":{VERSION},"kind":"relayed","quiet":{"true" if quiet else "false"},'
        f'"rank":0,"t":{stamp},{carried}}}'
    )
    return f"{PREFIX}{text} {signer.sign(text.encode())}"


def _batched(line: str) -> tuple[str, str]:
    """The kind and JSON body of ``line`` when it is a signed protocol line of
    :data:`BATCHED_KINDS` as :func:`encode` writes it (a JSON object body, then a
    signature); else ``("", "")``."""
    for kind in BATCHED_KINDS:
        if line.startswith(_STARTS[kind]):
            cut = line.rfind(" ")
            if line[cut - 1] == "}" and len(line) - cut - 1 == SIGNATURE_CHARS:
                return kind, line[len(PREFIX) : cut]
            return "", ""
    return "", ""


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


def nests_deeper(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when decoded JSON ``value`` nests arrays and objects deeper than ``limit``
    (a scalar nests 0 deep). Level by level, never recursing: a line's body is decoded
    first (the decoder stops at the interpreter's recursion limit), then checked here,
    before anything that recurses reads it."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        inner: list[Any] = []
        for container in level:
            items = container.values() if type(container) is dict else container
            inner += [item for item in items if type(item) is dict or type(item) is list]
        level = inner
    return False


def decode(body: str) -> tuple[dict[str, Any] | None, str]:
    """The fields of a line's JSON body, or None and why it cannot be read (never raises)."""
    try:
        fields = json.loads(body)
    except RecursionError:
        fields = None  # deeper than the interpreter's recursion limit
    except ValueError:
        return None, "the line's body is not JSON"
    # as many containers as opening brackets at most: a body with few (a single metric line)
    # cannot nest too deep, and is not walked
    few = body.count("{") + body.count("[") <= MAX_DEPTH
    if fields is None or (not few and nests_deeper(fields)):
        return None, f"the line's body nests deeper than {MAX_DEPTH} levels"
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


def metric_step(line: str) -> tuple[int, int] | None:
    """``(rank, step)`` of a metric line as :func:`encode` writes it (``step`` first of its
    fields), read without decoding it or checking its signature; else None."""
    match = _METRIC_STEP.match(line)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def is_quiet(line: bytes) -> bool:
    """True when ``line`` holds a protocol line of a quiet kind (see :data:`QUIET_KINDS`)."""
    return any(marker in line for marker in QUIET_MARKERS)
