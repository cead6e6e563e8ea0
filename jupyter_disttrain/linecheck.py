"""What a signed worker line may say: each kind's fields, typed and bounded by the job's spec.

Pure: no I/O. :func:`problem` returns why a decoded protocol line cannot be
believed (a wrong type, a rank outside the job, a world size the spec does
not have, a non-finite time, an oversized field), or None when every field
it carries fits. A line is at most :data:`MAX_LINE` characters, and what the
monitor allocates per rank is bounded by the spec, never by what a line says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .runtime.numbers import is_finite, is_number

#: A longest protocol line, in characters (rank 0's inline result is the largest).
MAX_LINE: Final = 6 * 2**20
TEXT: Final = 4096
LONG_TEXT: Final = 2**20
MAX_NAMES: Final = 1024
MAX_STEP: Final = 2**53
#: Most lines one ``relayed`` line may carry.
MAX_RELAYED: Final = 4096
#: A ``relayed`` line's metric columns, in order (:func:`.runtime.protocol.relayed`).
_COLUMNS: Final = ("rank", "t", "step", "values")


@dataclass(frozen=True)
class Shape:
    """The job a line must belong to: its world size, nodes and processes per node."""

    world_size: int
    nodes: int
    nproc: int


def _int(value: Any, low: int = -MAX_STEP, high: int = MAX_STEP) -> bool:
    if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
        return False  # (an exact int, what JSON decodes, is the fast path)
    return low <= value <= high


def _num(value: Any, *, finite: bool = True) -> bool:
    if type(value) is float:  # what JSON decodes for a time: the fast path
        return not finite or math.isfinite(value)
    return is_finite(value) if finite else is_number(value)


def _text(value: Any, limit: int = TEXT) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _values(value: Any) -> bool:
    """A ``{name: number}`` map (metric values may be NaN or infinite: a diverging loss is real)."""
    if type(value) is not dict or len(value) > MAX_NAMES:
        return False
    for name, number in value.items():
        if not is_number(number) or len(name) > 256:
            return False
    return True


def _columns(value: Any) -> bool:
    """A ``relayed`` line's metric columns: ``rank``, ``t``, ``step`` and ``values`` lists
    of one length, at most :data:`MAX_RELAYED` (each entry is checked as a metric line's
    would be: :func:`metric_columns_fit`, then one by one where one does not fit)."""
    if type(value) is not dict or len(value) != len(_COLUMNS):
        return False
    columns: list[list[Any]] = []
    for name in _COLUMNS:
        column = value.get(name)
        if type(column) is not list:
            return False
        columns.append(column)
    length = len(columns[0])
    return length <= MAX_RELAYED and all(len(column) == length for column in columns)


def metric_columns_fit(
    ranks: list[Any], times: list[Any], steps: list[Any], values: list[Any], shape: Shape
) -> bool:
    """True when every entry of a ``relayed`` line's metric columns (as :func:`_columns`
    admits) fits a metric line of the job: a rank of the job, a finite time after 0, a
    step, a ``{name: number}`` map. Column by column, for the common case; False says only
    that some entry does not fit."""
    if not ranks:
        return True
    if not all(type(rank) is int for rank in ranks) or min(ranks) < 0:
        return False
    if max(ranks) >= shape.world_size or not all(type(t) is float for t in times):
        return False
    try:
        if min(times) <= 0 or not math.isfinite(math.fsum(times)):
            return False
    except OverflowError:
        return False
    if not all(type(step) is int for step in steps) or min(steps) < -MAX_STEP:
        return False
    return max(steps) <= MAX_STEP and all(_values(value) for value in values)


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _small_dict(value: Any) -> bool:
    return isinstance(value, dict) and len(value) <= 64


_Fields = Mapping[str, Callable[[Any], bool]]

_STEP: Final = _int
_COUNT: Final = lambda v: _int(v, 0)  # noqa: E731
_SECONDS: Final = lambda v: _num(v) and v >= 0  # noqa: E731

#: Each kind's known fields and the check of each (a field may be absent).
FIELDS: Final[dict[str, _Fields]] = {
    "hello": {
        "local_rank": _COUNT,
        "world_size": _COUNT,
        "node_rank": _COUNT,
        "host": _text,
        "pid": _COUNT,
        "backend": _text,
        "restart": _COUNT,
        "task": _text,
        "versions": lambda v: (
            _small_dict(v) and all(_text(k, 256) and _text(x, 256) for k, x in v.items())
        ),
    },
    "metric": {"step": _STEP, "values": _values},
    "checkpoint": {"step": _STEP, "uri": _text, "bytes": _COUNT, "metrics": _values},
    "loaded": {"step": _STEP, "uri": _text},
    "result": {
        "encoding": _text,
        "data": lambda v: _text(v, MAX_LINE),
        "uri": _text,
        "bytes": _COUNT,
    },
    "error": {
        "type": _text,
        "module": _text,
        "message": lambda v: _text(v, LONG_TEXT),
        "traceback": lambda v: _text(v, LONG_TEXT),
        "type_pickle": lambda v: _text(v, LONG_TEXT),
    },
    "done": {"seconds": _SECONDS},
    "stacks": {
        "request": _text,
        "reason": _text,
        "quiet": _SECONDS,
        "pid": _COUNT,
        "threads": lambda v: isinstance(v, list) and len(v) <= 4096,
        "collective": _opt(_small_dict),
    },
    "staging": {
        "src": _text,
        "dest": _text,
        "state": _text,
        "done": _COUNT,
        "total": _opt(_COUNT),
        "files_done": _COUNT,
        "files_total": _COUNT,
        "host": _text,
        "message": lambda v: _text(v, LONG_TEXT),
    },
    "resources": {
        "cpu_pct": _SECONDS,
        "rss_bytes": _COUNT,
        "mem_limit_bytes": _COUNT,
        "gpu_util_pct": _SECONDS,
        "gpu_mem_bytes": _COUNT,
    },
    "progress": {"step": _COUNT, "total": lambda v: _int(v, 1)},
    "session": {"port": lambda v: _int(v, 1, 65535), "world_size": _COUNT},
    "cell": {"id": lambda v: _int(v, 0) or _text(v), "phase": _text, "status": _text},
    "paused": {
        "port": lambda v: _int(v, 1, 65535),
        "pid": _COUNT,
        "file": _text,
        "line": _COUNT,
        "function": _text,
        "exception": _text,
    },
    "resumed": {},
    "relayed": {
        "quiet": lambda v: isinstance(v, bool),
        "lines": lambda v: isinstance(v, list) and len(v) <= MAX_RELAYED,
        "metrics": _columns,
    },
}
#: Kinds that speak for the whole job (no rank).
JOB_WIDE: Final = frozenset({"staging"})


def problem(kind: str, rank: Any, t: Any, fields: Mapping[str, Any], shape: Shape) -> str | None:
    """Why a line of ``kind`` from ``rank`` at ``t`` cannot be believed; None when it can."""
    known = FIELDS.get(kind)
    if known is None:
        return f"unknown kind {kind!r}"
    if kind in JOB_WIDE:
        if rank is not None:
            return f"{kind} lines speak for the whole job, not rank {rank!r}"
    elif not _int(rank, 0, shape.world_size - 1):
        return f"rank {rank!r} is not a rank of this job (world size {shape.world_size})"
    if not _num(t) or t <= 0:
        return f"time {t!r} is not a finite time"
    for name, check in known.items():
        if name in fields and not check(fields[name]):
            return f"field {name!r} of a {kind} line is out of range or of the wrong type"
    if kind == "hello":
        return _hello(fields, shape)
    if kind == "session" and fields.get("world_size", shape.world_size) != shape.world_size:
        return f"world size {fields['world_size']} is not the job's ({shape.world_size})"
    return None


def _hello(fields: Mapping[str, Any], shape: Shape) -> str | None:
    world = fields.get("world_size", shape.world_size)
    if world != shape.world_size:
        return f"world size {world} is not the job's ({shape.world_size})"
    if fields.get("node_rank", 0) >= shape.nodes:
        return f"node {fields['node_rank']} is not a node of this job ({shape.nodes} nodes)"
    if fields.get("local_rank", 0) >= shape.nproc:
        return f"local rank {fields['local_rank']} is outside the job's {shape.nproc} per node"
    return None
