"""A pod's training command: torchrun whose workers fork from one warm process.

``python -u -m jupyter_disttrain.runtime.podlaunch PAYLOAD`` is ``python -m
torch.distributed.run --module jupyter_disttrain.runtime.worker PAYLOAD``
(nodes, rank, rendezvous and processes per node from the ``PET_*``
environment the training operator sets), with one difference: torch and the
worker runtime are imported once per pod instead of once per process. This
process imports them (:func:`.forked.preload`), forks torchrun's agent, and
serves the agent's workers from a private Unix socket as the local launcher
does (:mod:`.zygote`): each worker torchrun starts is the fork client
(:mod:`.forkclient`), which has a warm worker forked here and stands in for
it. A pod of 8 processes imports torch once, not 9 times.

What a pod sees is torchrun's: its output (workers write to this process's
stdout, the container's), the exit status (the agent's; ``128 + N`` when a
signal ``N`` ended it), and SIGTERM (forwarded to the agent, which stops its
workers as torchrun does; the kubelet's grace period, not this process,
decides when the rest is killed). Stores bind where torchrun binds them: a
pod's rank 0 must be reachable from the other pods. When this process cannot
fork safely (it has started a thread), the agent is torchrun started afresh
and each fork client execs the worker module itself.
Standard library and torch only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from types import FrameType
from typing import Any

from . import forkclient
from .forked import exit_status_of, preload, single_threaded_pools
from .launcher_identity import thread_count
from .localworker import WORKER as WORKER_MODULE
from .socketdir import private_socket_path
from .zygote import Launcher

SOCKET_NAME = "launcher.sock"


class PodLauncher(Launcher):
    """The fork server of one pod: no owner but its agent, workers with torch's own stores.

    It serves until the agent it started (:meth:`start_torchrun`) has ended.
    """

    owned = False
    loopback_stores = False
    warm_in_place = True

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.agent_pid = 0
        self._agent_end: socket.socket | None = None

    def install_signals(self) -> None:
        """SIGTERM goes to the agent (torchrun stops its workers); SIGCHLD wakes ``select``."""
        super().install_signals()
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        if self.agent_pid:
            with contextlib.suppress(OSError):
                os.kill(self.agent_pid, signum)

    def start_torchrun(self, argv: list[str], env: dict[str, str]) -> None:
        """Start torchrun's agent on ``argv`` with ``env``: forked when this process may fork."""
        mine, theirs = socket.socketpair()
        self._agent_end = mine
        if thread_count() > 1:  # never run Python after fork in a threaded process
            proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "torch.distributed.run", *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
            self.popen[proc.pid] = proc
            self.agent_pid = proc.pid
            self._register(theirs, proc.pid, 0, forked=False)
            return
        self.flush_output()
        pid = os.fork()
        if pid == 0:
            mine.close()
            theirs.close()
            self._become_child(0, env, None, keep=None)
            os.environ["DISTRAIN_PGID"] = str(os.getpgid(0))  # its workers join the group
            os._exit(exit_status_of(lambda: _torchrun(argv)))
        self.agent_pid = pid
        self._register(theirs, pid, 0, forked=True)

    def retire_when_idle(self) -> None:
        """Stop serving once the agent has ended."""
        if self.agent_pid not in self.children:
            self.running = False

    def agent_status(self) -> int:
        """The agent's ending as a process exit status (``128 + N`` for signal ``N``)."""
        assert self._agent_end is not None
        outcome: dict[str, Any] = {}
        with self._agent_end.makefile("r") as lines:
            for line in lines:
                outcome = _json(line) or outcome
        if "signal" in outcome:
            return 128 + int(outcome["signal"])
        return int(outcome.get("exit", 1))


def socket_path() -> str | None:
    """A Unix socket path in a new private (0700) directory; None where none can be made
    (:func:`.socketdir.private_socket_path`)."""
    return private_socket_path("distrain-pod-", SOCKET_NAME)


def _json(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _torchrun(argv: list[str]) -> None:
    from torch.distributed import run

    from .agent import worker_rounds

    worker_rounds()
    run.main(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``podlaunch PAYLOAD``; returns the agent's exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -u -m jupyter_disttrain.runtime.podlaunch PAYLOAD", file=sys.stderr)
        return 2
    path = socket_path()
    if path is None:  # nowhere to serve from: torchrun as it comes
        torchrun = ["-m", "torch.distributed.run", "--module", WORKER_MODULE, args[0]]
        os.execv(sys.executable, [sys.executable, "-u", *torchrun])
    env = {**os.environ, forkclient.ENV_LAUNCHER: path, forkclient.ENV_FALLBACK: WORKER_MODULE}
    single_threaded_pools()  # this process only: the agent and its workers get `env`
    launcher = PodLauncher(path)
    launcher.install_signals()
    preload()
    launcher.start_torchrun([*forkclient.torchrun_command(), args[0]], env)
    try:
        launcher.serve()
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path))
    return launcher.agent_status()


if __name__ == "__main__":
    sys.exit(main())
