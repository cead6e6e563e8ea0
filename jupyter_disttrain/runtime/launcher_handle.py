"""torchrun's handle on a worker the launcher forks, asked for by the agent itself.

In fork mode each worker's command is the fork client (:mod:`.forkclient`): a
process that asks the launcher for the worker and then stands in for it. An
agent the launcher forked asks the launcher itself instead (:func:`install`):
no interpreter starts per worker (about 30 ms of CPU each, four at once on a
2x2 job), and the workers are forked while the fork clients would still be
starting. torchrun gets a :class:`LauncherWorker` where it would get the
``Popen`` of a fork client, with the same contract (``pid``, ``returncode``,
``poll``, ``wait``, ``send_signal``), read from the connection on which the
launcher, the worker's parent, says how the worker ended. That connection is
also the worker's lifeline: when the agent dies, the worker does
(:func:`.forked.watch_lifeline`). When the launcher does not fork (threads, a
library the job must not inherit, code changed since), the fork client's
command runs as before, and its log says why.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from . import forkclient


class LauncherWorker:
    """A worker the launcher forked, as torchrun's process context uses a ``Popen``.

    ``returncode`` is None while it runs, then its exit status, or minus the
    signal that ended it; 1 when the launcher went away first (the worker is
    killed then, as the fork client does).
    """

    def __init__(self, conn: socket.socket, pid: int, args: Sequence[str], pending: bytes) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._conn = conn
        self._pending = pending  # read after the launcher's answer: its next line, begun
        self._pidfd = _open_pidfd(pid)
        self._read(0.0)

    def poll(self) -> int | None:
        """The worker's ending if it has ended, else None; never blocks."""
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the worker ends (``subprocess.TimeoutExpired`` after ``timeout`` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read(left)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal the worker unless it has ended."""
        if self.poll() is None:
            self._deliver(signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, timeout: float | None) -> None:
        """Read what the launcher said within ``timeout`` seconds; end on its outcome line."""
        if b"\n" not in self._pending:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                return
            try:
                data = self._conn.recv(4096)
            except OSError:
                data = b""
            if not data:  # the launcher is gone: take the worker down with it
                self._deliver(signal.SIGKILL)
                self._end(1)
                return
            self._pending += data
        if b"\n" in self._pending:
            line = self._pending.split(b"\n", 1)[0]
            self._end(forkclient.returncode(line))

    def _deliver(self, signum: int) -> None:
        """Send ``signum`` to the worker, through its pidfd where there is one (a pid the
        system gave to a new process since is never signalled)."""
        with contextlib.suppress(ProcessLookupError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            else:
                os.kill(self.pid, signum)

    def _end(self, code: int) -> None:
        self.returncode = code
        self._conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def is_fork_client(args: Sequence[str]) -> bool:
    """Whether ``args`` run the fork client (:func:`.forkclient.torchrun_command`) on a payload."""
    command = forkclient.torchrun_command()[1:]
    return len(args) == len(command) + 1 and tuple(args[: len(command)]) == command


def ask_launcher(args: Sequence[str], env: dict[str, str]) -> LauncherWorker | None:
    """The worker the fork client ``args`` would ask for, forked now by the launcher in
    ``env``; None when the launcher cannot give one (the fork client then says why)."""
    path = env.get(forkclient.ENV_LAUNCHER)
    got = forkclient.request_fork(path, args[-1], env) if path else None
    if got is None or isinstance(got, str):
        return None
    conn, answer, received = got
    if not isinstance(answer["pid"], int):
        conn.close()
        return None
    return LauncherWorker(conn, answer["pid"], args, received)


def install() -> None:
    """Make this agent's torchrun ask the launcher for fork-client workers itself
    (idempotent; call in an agent the launcher forked, before torchrun starts workers)."""
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler

    current = getattr(api, "get_subprocess_handler")  # noqa: B009 (not in torch's exports)
    if getattr(current, "_distrain_launcher", False):
        return
    base: Any = SubprocessHandler

    class LauncherHandler(base):  # type: ignore[misc]
        """torchrun's subprocess handler; a fork client's worker comes from the launcher."""

        def _popen(self, args: tuple[str, ...], env: dict[str, str]) -> Any:
            command = [str(a) for a in args]
            worker = ask_launcher(command, env) if is_fork_client(command) else None
            return worker if worker is not None else super()._popen(args, env)

        def close(self, death_sig: signal.Signals | None = None) -> None:
            if not isinstance(self.proc, LauncherWorker):
                super().close(death_sig)
                return
            # its group is the job's: signal the worker alone, as killpg of a fork client did
            self.proc.send_signal(death_sig or signal.SIGTERM)
            for stream in (self._stdout, self._stderr):
                if stream:
                    stream.close()

    def get_subprocess_handler(**kwargs: Any) -> Any:
        return LauncherHandler(**kwargs)

    get_subprocess_handler._distrain_launcher = True  # type: ignore[attr-defined]
    setattr(api, "get_subprocess_handler", get_subprocess_handler)  # noqa: B010
