"""Small formatting helpers shared by the dashboard's HTML pieces."""

from __future__ import annotations

import html

from ..units import duration

__all__ = ["ago", "duration", "esc", "rate", "state_class"]


def esc(value: object) -> str:
    """HTML-escaped ``str(value)`` (quotes included, safe in attributes)."""
    return html.escape(str(value), quote=True)


def ago(seconds: float | None) -> str:
    """Time since something, coarse enough to change at most once a second."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return "<1s ago"
    if seconds < 60:
        return f"{int(seconds)}s ago"
    return f"{duration(seconds)} ago"


def rate(value: float | None) -> str:
    """A steps-per-second figure with 3 significant digits, ``-`` when unknown."""
    return "-" if value is None else f"{value:.3g}"


def state_class(state: str) -> str:
    """CSS class of a job or rank state: ``distrain-state-running``..."""
    return "distrain-state-" + state.lower()
