"""jupyter_disttrain: run a notebook cell as a real multi-node distributed training job.

In a notebook::

    %load_ext jupyter_disttrain
    %%distrain --nodes 2 --nproc 2 -o job
    ...training code; report(step=i, loss=loss)...

Importing this package is cheap and safe inside workers: the notebook-side
API (``Job``, ``submit``...) loads on first use, and ``report`` comes from the
worker runtime, which needs only the standard library.
"""

from __future__ import annotations

from typing import Any

from .runtime.report import report

__version__ = "0.1.0"
__all__ = [
    "CheckpointStore",
    "Job",
    "JobSpec",
    "Session",
    "SessionLost",
    "__version__",
    "every",
    "load_checkpoint",
    "load_ipython_extension",
    "report",
    "save_checkpoint",
    "submit",
]

_LAZY = {
    "Job": "job",
    "submit": "service",
    "JobSpec": "spec",
    "CheckpointStore": "checkpoints.store",
    "save_checkpoint": "runtime.checkpoint.api",
    "load_checkpoint": "runtime.checkpoint.api",
    "every": "runtime.checkpoint.api",
    "Session": "sessions",
    "SessionLost": "sessions",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_disttrain``: warm the default backend, register the magics.

    The imports run without the garbage collector's passes (:mod:`.runtime.collector`):
    in a kernel each full pass walks every object the notebook holds.
    """
    from .runtime import collector

    with collector.paused():
        from .magic_config import prewarm_configured

        prewarm_configured(getattr(ipython, "config", None))
        from .magics import load

        load(ipython)
        from .debug_magics import load as load_debugger

        load_debugger(ipython)
        from .dap import install

        install(ipython)  # the ranks of its jobs in the kernel's Debugger panel
