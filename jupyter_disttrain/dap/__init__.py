"""The ranks of this kernel's ``%%distrain`` jobs in JupyterLab's Debugger panel.

:func:`install` (run by ``%load_ext jupyter_disttrain`` in an ipykernel with a
debugger) wraps the kernel's DAP handling (:class:`~.bridge.RankBridge`);
:func:`cell_breakpoints` gives the magic the breakpoints the panel set in the
cell, as the workers' lines; :func:`focus` shows one paused rank in the panel. Outside
such a kernel the first two do nothing.
"""

from __future__ import annotations

from typing import Any

from ..debugging import DebugError
from ..service import default_service
from .bridge import RankBridge

_bridges: list[RankBridge] = []


def install(ipython: Any) -> RankBridge | None:
    """Let the kernel's debugger see the ranks (once per kernel); None without a debugger."""
    debugger = getattr(getattr(ipython, "kernel", None), "debugger", None)
    if debugger is None or not hasattr(debugger, "process_request"):
        return None
    for bridge in _bridges:
        if bridge.debugger is debugger:
            return bridge
    bridge = RankBridge(debugger, lambda: default_service().registered())
    bridge.install()
    _bridges.append(bridge)
    return bridge


def cell_breakpoints(ipython: Any, name: str, body: str) -> list[dict[str, Any]]:
    """The panel's breakpoints in the ``%%distrain`` cell ``body`` of job ``name``, as
    ``[{"line", "condition"}]`` of the workers' source; [] without any."""
    debugger = getattr(getattr(ipython, "kernel", None), "debugger", None)
    history = getattr(getattr(ipython, "history_manager", None), "input_hist_raw", None)
    raw = str(history[-1]) if history else ""
    for bridge in _bridges:
        if bridge.debugger is debugger:
            return bridge.breakpoints_for(name, body, raw)
    return []


def focus(ipython: Any, name: str, rank: int) -> None:
    """Show paused ``rank`` of job ``name`` in this kernel's Debugger panel; DebugError
    naming why not (no debugger in this kernel, the rank not stopped there)."""
    debugger = getattr(getattr(ipython, "kernel", None), "debugger", None)
    for bridge in _bridges:
        if bridge.debugger is debugger:
            bridge.focus(name, rank)
            return
    raise DebugError("this kernel has no Debugger panel (ipykernel with debugpy is needed)")
