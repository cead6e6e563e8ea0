"""Printed text as a terminal shows it: a carriage return draws over its line.

A progress bar (tqdm, Lightning's, Hugging Face's) redraws its line after a
``\\r``. A worker ends such a line before each protocol line it writes
(:mod:`.runtime.lineends`), so a bar redrawn a thousand times while the cell
reports arrives as a thousand lines, each starting with ``\\r``. Every view
reads them as a terminal leaves them: a line shows its text after its last
``\\r``, and a redraw that follows a redraw of the same stream takes its place.
Pure functions; lines are split at ``\\n`` only (``str.splitlines`` would split
at the ``\\r`` too and lose which lines redraw).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["CR", "physical_lines", "redraws", "shown", "terminal_lines"]

#: A terminal's carriage return: what follows it draws over the line.
CR = "\r"

Key = TypeVar("Key", bound=Hashable)


def shown(text: str) -> str:
    """What a terminal shows of ``text``: its last part after a ``\\r`` that has any."""
    if CR not in text:
        return text
    parts = [part for part in text.split(CR) if part]
    return parts[-1] if parts else ""


def redraws(text: str) -> bool:
    """Whether ``text`` draws over the line before it (it starts with ``\\r``)."""
    return text.startswith(CR)


def physical_lines(text: str) -> list[str]:
    """``text`` split at ``\\n`` only; a final newline ends the last line and starts none."""
    if not text:
        return []
    return text.removesuffix("\n").split("\n")


def terminal_lines(items: Iterable[tuple[Key, str]]) -> list[tuple[Key, str]]:
    """``(stream, line)`` pairs as a terminal of each stream leaves them: each line shown
    (:func:`shown`), a redraw that follows a redraw of its stream in that one's place."""
    out: list[tuple[Key, str]] = []
    last_redraw: dict[Key, int] = {}  # stream -> index in ``out`` of its line, if a redraw
    for key, line in items:
        at = last_redraw.pop(key, None)
        if redraws(line) and at is not None:
            out[at] = (key, shown(line))
            last_redraw[key] = at
            continue
        if redraws(line):
            last_redraw[key] = len(out)
        out.append((key, shown(line)))
    return out
