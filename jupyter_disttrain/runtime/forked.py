"""What a launcher imports for the processes it forks, and what they run (:mod:`.zygote`).

:func:`preload` runs in the launcher, before it serves; the ``run_*`` functions
run in a forked child and return its exit status (tracebacks go to its log).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable

from .launcher_identity import LAUNCHER_DEFAULTS

PRELOAD = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.distributed.run",
    "torch.distributed.elastic.agent.server.local_elastic_agent",
    "torch.nn.parallel",
    "torch.utils.data",
    "torch.optim",
    "torch._dynamo",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
    "cloudpickle",
    "jupyter_disttrain.runtime.agent",
    "jupyter_disttrain.runtime.launcher_handle",
    "jupyter_disttrain.runtime.worker",
)


def preload() -> list[str]:
    """Import what a training step needs; return the modules that failed to import.

    The imports run without the collector's passes, then what they made is frozen
    (:func:`.collector.frozen`): the forked agents and workers neither walk it nor copy
    its pages when they collect.
    """
    import importlib

    from . import collector, integrations

    missing = []
    with collector.frozen():
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except Exception:
                missing.append(name)
        integrations.targets()  # the entry-point scan, once, before the forks
    return missing


def single_threaded_pools() -> None:
    """No thread pools in a launcher (a fork after threads start can deadlock); each worker
    sets its own thread count from the job's environment. Call before importing torch."""
    for var in LAUNCHER_DEFAULTS:
        os.environ.setdefault(var, "1")


def redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def exit_status_of(run: Callable[[], int | None]) -> int:
    """Call ``run`` in a forked child; its exit status (tracebacks go to the log)."""
    try:
        code = run() or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def run_agent(argv: list[str]) -> int:
    """Run torchrun's main in this (forked) process; return its exit status. Its workers
    come from the launcher it was forked from, asked for by this process
    (:mod:`.launcher_handle`)."""

    def agent() -> None:
        from . import agent, launcher_handle

        launcher_handle.install()
        agent.main(argv)

    return exit_status_of(agent)


def watch_lifeline(conn: socket.socket) -> None:
    """Kill this worker as soon as its client's connection closes."""

    def watch() -> None:
        try:
            while conn.recv(1024):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="distrain-lifeline", daemon=True).start()


def run_worker(argv: list[str], env: dict[str, str], loopback: bool) -> int:
    """Run the worker runtime in this (forked) process; return its exit status.

    ``loopback``: a store it hosts listens on 127.0.0.1 (see :mod:`.localworker`).
    """

    def work() -> int:
        import torch

        threads = env.get("OMP_NUM_THREADS")
        torch.set_num_threads(int(threads) if threads else (os.cpu_count() or 1))
        from . import worker
        from .agent import bind_stores_to_loopback

        if loopback:
            bind_stores_to_loopback(agent=False)

        return worker.main(argv)

    return exit_status_of(work)
