"""Progress from a tqdm bar in the cell: rank 0's bar drives the job's progress and ETA.

When the cell uses tqdm (an optional package), rank 0 wraps ``tqdm.std.tqdm``'s
``refresh`` and ``close``, which every bar class inherits (console, ``tqdm.auto``,
notebook and rich bars): each time a bar redraws, its ``n`` of ``total`` goes out
as a ``progress`` line (rate-limited by :func:`.report.progress`). One bar is
followed at a time, the first one with a known total that is still open, so
an outer epoch bar wins over the inner batch bars. ``report(total=...)``,
once called, wins over any bar, and so does a library's own count (autolog).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from . import report

_followed: weakref.ref[Any] | None = None


def uses_tqdm(source: str, blobs: list[bytes]) -> bool:
    """True when the cell's source or its captured functions name tqdm."""
    return "tqdm" in source or any(b"tqdm" in blob for blob in blobs)


def install() -> bool:
    """Hook tqdm's bars (idempotent); False when tqdm is not installed."""
    try:
        from tqdm import std
    except ImportError:
        return False
    cls: Any = std.tqdm
    if getattr(cls, "_distrain_hooked", False):
        return True
    refresh: Callable[..., Any] = cls.refresh
    close: Callable[..., Any] = cls.close

    def hooked_refresh(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = refresh(self, *args, **kwargs)
        _drawn(self, closing=False)
        return out

    def hooked_close(self: Any) -> Any:
        out = close(self)
        _drawn(self, closing=True)
        return out

    cls.refresh, cls.close, cls._distrain_hooked = hooked_refresh, hooked_close, True
    return True


def _drawn(bar: Any, *, closing: bool) -> None:
    """A bar redrew (or closed): report its count if it is the one followed."""
    global _followed
    try:
        total = int(bar.total or 0)
        done = int(bar.n)
        disabled = bool(getattr(bar, "disable", False))
    except (TypeError, ValueError, AttributeError):
        return
    if disabled or total < 1 or report.explicit_total or report.library_total:
        return
    current = _followed() if _followed is not None else None
    if current is None and not closing:
        current, _followed = bar, weakref.ref(bar)
    if current is not bar:
        return
    report.progress(min(done, total), total)
    if closing:
        report.flush_progress()
        _followed = None
