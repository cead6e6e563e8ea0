"""Where a ``%%distrain`` cell's lines are in the workers' source (pure).

The Debugger panel numbers a cell's lines from its first, the magic's line;
a worker runs the cell's body as IPython transforms it
(:func:`~jupyter_disttrain.payload.transform_cell`), which drops the body's
leading blank lines. So worker line = cell line - 1 - (leading blank lines).
"""

from __future__ import annotations

import re
from typing import Any

MAGIC = "%%distrain"
_CELL_FILE = re.compile(r"<distrain-cell(?:-\d{1,9})?>")


def is_distrain_cell(code: str) -> bool:
    """True for a ``%%distrain`` cell (a job's, or a ``--session`` cell run on live ranks)."""
    first = code.split("\n", 1)[0]
    return first == MAGIC or first.startswith(MAGIC + " ")


def is_cell_file(file: str) -> bool:
    """True for the file name a worker runs a cell under: ``<distrain-cell>`` (a job's) or
    ``<distrain-cell-N>`` (a session's cell N)."""
    return _CELL_FILE.fullmatch(file) is not None


def newest_cell_file(files: list[str]) -> str | None:
    """Of a stack's ``files``, the cell running now: a job's, or the session's newest cell."""
    numbered = [(_cell_number(f), f) for f in files if is_cell_file(f)]
    return max(numbered)[1] if numbered else None


def _cell_number(file: str) -> int:
    """N of ``<distrain-cell-N>`` (0 for a job's ``<distrain-cell>``)."""
    digits = file.removeprefix("<distrain-cell").strip("->")
    return int(digits) if digits else 0


def body_of(code: str) -> str:
    """The cell below its magic line (what the magic receives)."""
    return code.split("\n", 1)[1] if "\n" in code else ""


def shift(code: str) -> int:
    """Lines of the cell before the worker's line 1."""
    lines = body_of(code).split("\n")
    blank = 0
    while blank < len(lines) - 1 and not lines[blank].strip():
        blank += 1
    return 1 + blank


def to_worker(code: str, line: int) -> int | None:
    """The worker's line of cell line ``line``; None for the magic's line or a dropped one."""
    worker = line - shift(code)
    return worker if worker >= 1 else None


def to_cell(code: str, line: int) -> int:
    """The cell line of the worker's line ``line``."""
    return line + shift(code)


def same_cell(code: str, body: str) -> bool:
    """True when ``code`` (a cell the panel dumped) is the ``%%distrain`` cell of ``body``."""
    return is_distrain_cell(code) and body_of(code).rstrip() == body.rstrip()


def worker_breakpoints(code: str, breakpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DAP ``SourceBreakpoint`` s of ``code`` as the workers' ``{"line", "condition"}``."""
    placed = []
    for spot in breakpoints:
        line = spot.get("line")
        worker = to_worker(code, line) if isinstance(line, int) else None
        if worker is not None:
            condition = spot.get("condition")
            placed.append({"line": worker, "condition": condition if condition else None})
    return placed
