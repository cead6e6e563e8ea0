"""The summary a parser returns, its JSON and text forms, and bounded line keeping."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..logbuffer import format_ranks
from .patterns import (
    MARKERS,
    MAX_TRACKED,
    RAW_HEAD,
    RAW_TAIL,
    Source,
)


@dataclass
class NcclSummary:
    """What a job's communication lines say.

    ``None`` means the lines do not say. ``transport`` maps each transport
    seen (``IB``, ``Socket``, ``P2P``, ``SHM``, ``NVLS``, ``CollNet`` or a
    net plugin's name) to the sorted global ranks known to use it; the list
    is empty where no line tied it to a rank. ``init_complete`` is ``True``
    when a communicator reported ``Init COMPLETE`` and no rank's init
    failed (NCCL's init is collective, so one rank completing means every
    rank got through bootstrap), ``False`` when a rank's init failed.
    ``failure`` is one of :data:`FAILURES`. ``raw_lines`` holds the NCCL
    lines and ``comm_lines`` the other c10d / gloo lines, each bounded to
    the first :data:`RAW_HEAD` and the last :data:`RAW_TAIL`; the
    ``*_dropped`` counts say how many were left out between the two.
    """

    nccl_version: str | None = None
    transport: dict[str, list[int]] = field(default_factory=dict)
    interfaces: list[str] = field(default_factory=list)
    nranks: int | None = None
    init_complete: bool | None = None
    warnings: int = 0
    failure: str = "none"
    diagnosis: str = ""
    backend: str = "unknown"
    raw_lines: list[str] = field(default_factory=list)
    comm_lines: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    raw_dropped: int = 0
    comm_dropped: int = 0


@dataclass
class Finding:
    cause: str
    text: str
    source: Source | None
    host: str | None
    dev: str | None


class Lines:
    """The first RAW_HEAD and the last RAW_TAIL lines added."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=RAW_TAIL)
        self.seen = 0

    def add(self, line: str) -> None:
        self.seen += 1
        if len(self.head) < RAW_HEAD:
            self.head.append(line)
        else:
            self.tail.append(line)

    def lines(self) -> list[str]:
        return [*self.head, *self.tail]

    def dropped(self) -> int:
        return self.seen - len(self.head) - len(self.tail)


def add_bounded(bounded: set[Any] | dict[Any, Any], key: Any, value: Any = None) -> None:
    """Add to a set (or dict) unless it already holds MAX_TRACKED entries."""
    if key in bounded or len(bounded) >= MAX_TRACKED:
        return
    if isinstance(bounded, dict):
        bounded[key] = value
    else:
        bounded.add(key)


def relevant(line: str) -> bool:
    for marker in MARKERS:
        if marker in line:
            return True
    return False


def summary_to_json(s: NcclSummary) -> dict[str, Any]:
    """The JSON object ``disttrain nccl LOGFILE --json`` prints (exactly these keys)."""
    return {
        "nccl_version": s.nccl_version,
        "transport": {name: list(ranks) for name, ranks in s.transport.items()},
        "interfaces": list(s.interfaces),
        "nranks": s.nranks,
        "init_complete": s.init_complete,
        "warnings": s.warnings,
        "failure": s.failure,
        "diagnosis": s.diagnosis,
    }


def summary_facts(s: NcclSummary, backend: str | None = None) -> list[tuple[str, str]]:
    """The per-job facts as ``(name, value)`` rows, for the text summary and the panel.

    ``backend`` overrides the backend the lines showed (the job's own
    ``--dist-backend``, when known); a fact not seen in the lines reads ``unknown``.
    """

    def unknown(value: object) -> str:
        return "unknown" if value is None or value == "" else str(value)

    transports = "; ".join(
        f"{name} (ranks {format_ranks(ranks).replace(',', ', ')})" if ranks else name
        for name, ranks in s.transport.items()
    )
    init = {True: "complete on every rank", False: "failed", None: "unknown"}[s.init_complete]
    return [
        ("backend", backend or s.backend),
        ("nccl", unknown(s.nccl_version)),
        ("ranks", unknown(s.nranks)),
        ("init", init),
        ("transport", transports or "unknown"),
        ("interfaces", ", ".join(s.interfaces) or "unknown"),
        ("warnings", str(s.warnings)),
        ("failure", s.failure),
    ]


def format_summary(s: NcclSummary) -> str:
    """A short multi-line text for people: :func:`summary_facts` and the diagnosis."""
    rows = [*summary_facts(s), ("diagnosis", s.diagnosis)]
    return "\n".join(f"{name:<11}{value}" for name, value in rows)
