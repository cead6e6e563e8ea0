"""Notebook widgets: the live job dashboard.

Importing this package is cheap; :class:`Dashboard` (ipywidgets, plotly)
loads on first use. :func:`available` says whether the current IPython
shell can show widgets.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dashboard import Dashboard as Dashboard

__all__ = ["Dashboard", "available", "prewarm"]

_NEEDED = ("ipywidgets", "plotly", "anywidget")


def available(shell: Any) -> bool:
    """True in a Jupyter kernel (ZMQ shell with a comm manager) with the widget packages."""
    if shell is None or "ZMQ" not in type(shell).__name__:
        return False
    kernel = getattr(shell, "kernel", None)
    if kernel is None or getattr(kernel, "comm_manager", None) is None:
        return False
    return all(importlib.util.find_spec(name) is not None for name in _NEEDED)


def prewarm(shell: Any) -> threading.Thread | None:
    """Import the dashboard's modules on a daemon thread, if ``shell`` can show widgets.

    plotly's first import costs seconds (it pulls in nbformat and
    jsonschema); done at ``%load_ext`` time, the first job's cell does not wait.
    """
    if not available(shell):
        return None
    thread = threading.Thread(
        target=importlib.import_module,
        args=(f"{__name__}.dashboard",),
        name="distrain-widgets-import",
        daemon=True,
    )
    thread.start()
    return thread


def __getattr__(name: str) -> Any:
    if name == "Dashboard":
        from .dashboard import Dashboard

        return Dashboard
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
