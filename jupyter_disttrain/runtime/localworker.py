"""The worker command of a local PyTorch job: the worker runtime with loopback-only stores.

``python -m jupyter_disttrain.runtime.localworker PAYLOAD`` is ``python -m
jupyter_disttrain.runtime.worker PAYLOAD`` (run as ``__main__``: it dies with
its node agent and leaves as a worker leaves) with one difference: a TCPStore
this process hosts listens on 127.0.0.1. Rank 0 hosts the workers' store when
torchrun does not share its own (``--max-restarts`` sets
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``), and torch would bind it to every
address. Only local jobs use it: a pod's rank 0 must be reachable from the
other pods. Started by a warm launcher's fork client that could not have its
worker forked, it takes the requester's ``sys.path`` (``DISTRAIN_SYS_PATH``)
first, as a forked worker does. Standard library and torch only.
"""

from __future__ import annotations

import os
import runpy

from .launcher_identity import apply_sys_path

WORKER = "jupyter_disttrain.runtime.worker"


def main() -> None:
    """Bind stores to loopback, then run the worker module as ``__main__``."""
    apply_sys_path(os.environ)
    from . import collector
    from .agent import bind_stores_to_loopback

    with collector.paused():  # torch's import
        bind_stores_to_loopback(agent=False)
    runpy.run_module(WORKER, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
