"""Keep full garbage collections short while a dashboard renders under load.

A notebook kernel with plotly and ipywidgets loaded tracks a few hundred
thousand long-lived objects, and every full collection walks all of them
(tens to hundreds of milliseconds, long enough to stall the kernel while
ranks flood it with lines). While at least one dashboard is live, the objects
that existed when the first one started are moved to the collector's
permanent generation (:func:`gc.freeze`); when the last one ends they are
handed back (:func:`gc.unfreeze`), so nothing is kept alive for good. Python
unfreezes only the whole heap: one that something else (the user's code, a
library) had frozen before the first dashboard stays frozen.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_holders = 0
#: Whether the heap was frozen by something else when the first dashboard froze it.
_frozen_before = False


def hold() -> None:
    """One more live dashboard; the first one freezes the current heap."""
    global _holders, _frozen_before
    with _lock:
        if _holders == 0:
            _frozen_before = gc.get_freeze_count() > 0
            gc.freeze()
        _holders += 1


def release() -> None:
    """One dashboard fewer; the last one unfreezes the heap, unless something else had
    frozen it before the first."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and not _frozen_before:
            gc.unfreeze()


def holders() -> int:
    """How many dashboards hold the freeze now."""
    with _lock:
        return _holders
