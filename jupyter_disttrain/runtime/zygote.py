"""The local launcher: a warm, single-threaded process that forks node agents and workers.

``python -m jupyter_disttrain.runtime.zygote SOCKET`` imports torch and the
modules a training step needs once, then serves fork requests on the Unix
socket ``SOCKET`` (JSON lines). Forking from it skips the interpreter start,
the torch import and the first-step lazy imports that dominate the start of a
small job, while staying safe: it never runs a thread of its own, checks that
it is still single-threaded before every fork (a fork after threads have
started can deadlock the child), and when it is not, starts agents with
fork+exec and tells worker clients to exec the worker themselves.

Requests, one JSON object per connection:

* ``{"op": "agent", "argv": [...], "env": {...}, "cwd": D, "pgid": G, "log": F}``:
  run ``torchrun argv`` with that environment, stdout and stderr appended to
  ``F``, in process group ``G`` (0: a new group led by the agent).
* ``{"op": "worker", "argv": [PAYLOAD], "env": {...}, "cwd": D, "pgid": G}``: run
  the worker runtime on ``PAYLOAD`` in group ``G``. The worker dies when the
  requesting connection closes (its client died).
* ``{"op": "ping"}``: the launcher's pid, thread count, identity, the files of
  the modules it imported (:mod:`.launcher_identity`: who may share it) and
  ``changed``, one of those files modified since it started importing (None
  when none: a requester must not fork old code from a changed one).
* ``{"op": "hold"}`` (lingering launchers): the ping answer, and the connection
  stays open for as long as the requesting process uses the launcher.

Every forked process gets the request's environment and working directory,
and its ``sys.path`` from ``DISTRAIN_SYS_PATH`` in that environment when set
(the requesting kernel's), so one launcher serves several kernels. An
agent's process group is ended (SIGTERM, then SIGKILL) when the connection
that requested it closes before it ended: its owner died. The socket is
bound (0600, in the owner's 0700 directory) before the imports, so an early
request waits for them instead of failing; a peer of another user id
(``SO_PEERCRED``) is refused. Idle, the launcher sleeps in ``select`` with
no timeout (a child's end wakes it through ``SIGCHLD``).

Each answer is ``{"pid": P, "pgid": G, "forked": bool}`` (or ``{"error": ...}``)
and, when the process ends, ``{"exit": CODE}`` or ``{"signal": N}``. When the
owner closes the launcher's stdin (or dies), every process group it started is
terminated and the launcher exits: a job never outlives its owner.

``zygote SOCKET --linger SECONDS`` starts a lingering launcher instead: it has
no owner, serves every process of this user and environment that holds it
(``hold``), and exits once it has had no holder and no child for ``SECONDS``.
It exits under an exclusive ``flock`` of ``SOCKET.lock`` after unlinking its
socket, and only when no connection waits in its backlog; a process that
connects under the same lock is therefore either served or finds no socket.
Once it finds one of its modules' files changed, it unlinks its socket, so the
next process starts a new launcher, and ends when its holders and jobs have.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .launcher_identity import (
    LAUNCHER_DEFAULTS,
    apply_sys_path,
    changed_since,
    identity,
    imported_from,
    peer_uid,
)
from .warm import Warmed

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
    "jupyter_disttrain.runtime.worker",
)
GRACE_SECONDS = 3.0


def preload() -> list[str]:
    """Import what a training step needs; return the modules that failed to import."""
    import importlib

    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            missing.append(name)
    from . import integrations

    integrations.targets()  # the entry-point scan, once, before the forks
    return missing


def single_threaded_pools() -> None:
    """No thread pools in a launcher (a fork after threads start can deadlock); each worker
    sets its own thread count from the job's environment. Call before importing torch."""
    for var in LAUNCHER_DEFAULTS:
        os.environ.setdefault(var, "1")


def thread_count() -> int:
    """OS threads in this process (a large number where it cannot be read)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1 << 30


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    """Write one JSON line; a vanished peer is not an error."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass


def read_request(conn: socket.socket, limit: int = 1 << 22) -> dict[str, Any]:
    """Read one JSON line request (bounded in size and time)."""
    conn.settimeout(10.0)
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ValueError("request too large")
    conn.settimeout(None)
    request = json.loads(data)
    if not isinstance(request, dict):
        raise ValueError("request must be a JSON object")
    return request


class Launcher:
    """The fork server's state: its socket, its owner pipe and its children."""

    #: Without ``linger``: it serves until its owner closes its stdin (or dies).
    owned = True
    #: Stores its workers host listen on loopback only (see :mod:`.localworker`).
    loopback_stores = True

    def __init__(
        self, path: str, ident: dict[str, Any] | None = None, linger: float | None = None
    ) -> None:
        self.path = path
        #: Lingering: seconds without a holder or child before it exits (None: owned).
        self.linger = linger
        self.holders: set[socket.socket] = set()
        self.busy_at = time.monotonic()
        self.started = time.time()  # before the imports: a file changed during them counts
        self.withdrawn = False  # its socket is unlinked: the path may be another's now
        self.identity = ident or identity()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(256)
        self.children: dict[int, socket.socket] = {}
        self.child_groups: dict[int, int] = {}
        self.groups: set[int] = set()
        self.popen: dict[int, subprocess.Popen[bytes]] = {}
        self.doomed: dict[int, float] = {}  # process group -> when it gets SIGKILL
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        if linger is None and self.owned:
            self.selector.register(sys.stdin, selectors.EVENT_READ, "owner")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.running = True
        #: The libraries imported ahead for the jobs that asked (:mod:`.warm`).
        self.warmed = Warmed()

    def install_signals(self) -> None:
        """SIGTERM ends the launcher; SIGCHLD (and any signal) wakes its ``select``."""
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "running", False))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)

    # -- serving ---------------------------------------------------------
    def serve(self) -> None:
        """Answer requests until the owner goes away."""
        while self.running:
            timeouts = list(self.doomed.values())
            if self.linger is not None and not (self.holders or self.children):
                timeouts.append(self.busy_at + self.linger)
            timeout = max(0.0, min(timeouts) - time.monotonic()) if timeouts else None
            for key, _ in self.selector.select(timeout):
                if key.data == "accept":
                    self.accept()
                elif key.data == "owner" and not os.read(sys.stdin.fileno(), 4096):
                    self.running = False
                elif key.data == "holder":
                    self.release(key.fileobj)  # type: ignore[arg-type]
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        while os.read(self.wake_r, 4096):
                            pass
                elif isinstance(key.data, int):
                    self.lifeline(key.data, key.fileobj)  # type: ignore[arg-type]
            self.reap()
            self.kill_doomed()
            self.retire_when_idle()
        self.shutdown()

    def release(self, conn: socket.socket) -> None:
        """A holder's connection is readable: on its end, forget the holder."""
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            self._unwatch(conn)
            self.holders.discard(conn)
            conn.close()

    def retire_when_idle(self) -> None:
        """Lingering: exit (socket unlinked first, under its lock) once idle for ``linger``."""
        if self.linger is None:
            return
        now = time.monotonic()
        if self.holders or self.children:
            self.busy_at = now
        elif self.withdrawn or (
            now >= self.busy_at + self.linger and _retire(self.listener, self.path)
        ):
            self.running = False

    def withdraw(self) -> None:
        """Unlink the socket now: no one new finds this launcher; it ends once idle."""
        self.withdrawn = True
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def lifeline(self, pid: int, conn: socket.socket) -> None:
        """The connection that asked for agent ``pid`` is readable: on its end, end the agent."""
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if data:
            return
        self._unwatch(conn)
        group = self.child_groups.get(pid)
        if pid in self.children and group is not None:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGTERM)
            self.doomed[group] = time.monotonic() + GRACE_SECONDS

    def kill_doomed(self) -> None:
        """SIGKILL the groups of vanished owners whose grace is over."""
        now = time.monotonic()
        for group, when in list(self.doomed.items()):
            if not _group_alive(group):
                del self.doomed[group]
            elif now >= when:
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
                del self.doomed[group]

    def _unwatch(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            if peer_uid(conn) != os.getuid():  # another user on this machine
                conn.close()
                return
        except OSError:
            conn.close()
            return
        try:
            request = read_request(conn)
            op = request.get("op")
            if op == "agent":
                self.start_agent(conn, request)
            elif op == "worker":
                self.start_worker(conn, request)
            elif op in ("ping", "hold"):
                changed = changed_since(self.started)
                if changed and self.linger is not None and not self.withdrawn:
                    self.withdraw()  # outdated: found by no one new (before it says so)
                send(
                    conn,
                    {
                        "pid": os.getpid(),
                        "threads": thread_count(),
                        "identity": self.identity,
                        "modules": imported_from(),
                        "linger": self.linger,
                        "changed": changed,
                    },
                )
                if op == "hold" and self.linger is not None:
                    self.holders.add(conn)
                    self.selector.register(conn, selectors.EVENT_READ, "holder")
                else:
                    conn.close()
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:
            send(conn, {"error": f"{type(exc).__name__}: {exc}"})
            conn.close()

    def _register(self, conn: socket.socket, pid: int, pgid: int, forked: bool) -> None:
        try:
            os.setpgid(pid, pgid or pid)
        except OSError:
            pass  # the child already did it, or exited
        try:
            group = os.getpgid(pid)
        except OSError:
            group = pgid or pid
        self.children[pid] = conn
        self.child_groups[pid] = group
        self.groups.add(group)
        send(conn, {"pid": pid, "pgid": group, "forked": forked})

    def start_agent(self, conn: socket.socket, req: dict[str, Any]) -> None:
        argv = [str(a) for a in req["argv"]]
        env = {str(k): str(v) for k, v in req["env"].items()}
        pgid = int(req.get("pgid", 0))
        self.warmed.request(env)  # then no fork in a threaded process, nor for a job it misleads
        if thread_count() > 1 or self.warmed.refusal(env):
            fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "jupyter_disttrain.runtime.agent", *argv],
                    env=env,
                    cwd=req.get("cwd") or None,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    process_group=pgid,
                )
            self.popen[proc.pid] = proc
            self._register(conn, proc.pid, pgid, forked=False)
            self.selector.register(conn, selectors.EVENT_READ, proc.pid)
            return
        self._flush()
        pid = os.fork()
        if pid == 0:
            self._become_child(pgid, env, req.get("cwd"), keep=None)
            os.environ["DISTRAIN_PGID"] = str(os.getpgid(0))  # its workers join the group
            _redirect(req["log"])
            os._exit(_run_agent(argv))
        self._register(conn, pid, pgid, forked=True)
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def start_worker(self, conn: socket.socket, req: dict[str, Any]) -> None:
        threads = thread_count()
        if threads > 1:
            raise RuntimeError(f"launcher has {threads} threads; not forking")
        env = {str(k): str(v) for k, v in req["env"].items()}
        self.warmed.request(env)
        if refused := self.warmed.refusal(env):
            raise RuntimeError(refused)
        pgid = int(req.get("pgid", 0))
        self._flush()
        pid = os.fork()
        if pid == 0:
            self._become_child(pgid, env, req.get("cwd"), keep=conn)
            _watch_lifeline(conn)
            os._exit(_run_worker([str(a) for a in req["argv"]], env, self.loopback_stores))
        self._register(conn, pid, pgid, forked=True)

    def _become_child(
        self, pgid: int, env: dict[str, str], cwd: str | None, keep: socket.socket | None
    ) -> None:
        """In a forked child: own group, clean signals, no server fds, the job's env."""
        try:
            os.setpgid(0, pgid)
        except OSError:
            pass
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        self.selector.close()
        self.listener.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        for conn in [*self.children.values(), *self.holders]:
            if conn is not keep:
                conn.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        apply_sys_path(env)

    @staticmethod
    def _flush() -> None:
        sys.stdout.flush()
        sys.stderr.flush()

    # -- children ----------------------------------------------------------
    def reap(self) -> None:
        """Collect ended children and tell their requesters how they ended."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            self.child_groups.pop(pid, None)
            proc = self.popen.pop(pid, None)
            if proc is not None:
                proc.returncode = os.waitstatus_to_exitcode(status)
            if conn is None:
                continue
            self._unwatch(conn)
            if os.WIFSIGNALED(status):
                send(conn, {"signal": os.WTERMSIG(status)})
            else:
                send(conn, {"exit": os.WEXITSTATUS(status)})
            conn.close()

    def shutdown(self) -> None:
        """Terminate every process group started here, then leave."""
        for sig, wait in ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, 1.0)):
            live = [g for g in self.groups if _group_alive(g)]
            for group in live:
                try:
                    os.killpg(group, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(_group_alive(g) for g in live):
                self.reap()
                time.sleep(0.05)
        self.reap()
        if not self.withdrawn:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def _retire(listener: socket.socket, path: str) -> bool:
    """Unlink ``path`` under its lock unless a connection waits; True when unlinked.

    The lock stays held (its descriptor open) until this process exits, so a
    process that takes it next finds no socket and starts a new launcher.
    """
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # someone is connecting: serve them first
    waiting, _, _ = select.select([listener], [], [], 0)
    if waiting:
        os.close(fd)
        return False
    with contextlib.suppress(OSError):
        os.unlink(path)
    return True


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except OSError:
        return False
    return True


def _redirect(log: str) -> None:
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


def _run_agent(argv: list[str]) -> int:
    """Run torchrun's main in this (forked) process; return its exit status."""

    def agent() -> None:
        from . import agent

        agent.main(argv)

    return exit_status_of(agent)


def _watch_lifeline(conn: socket.socket) -> None:
    """Kill this worker as soon as its client's connection closes."""

    def watch() -> None:
        try:
            while conn.recv(1024):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="distrain-lifeline", daemon=True).start()


def _run_worker(argv: list[str], env: dict[str, str], loopback: bool) -> int:
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``zygote SOCKET [--linger SECONDS]``; prints ``ready`` once it serves."""
    parser = argparse.ArgumentParser(prog="python -m jupyter_disttrain.runtime.zygote")
    parser.add_argument("socket", help="the Unix socket to serve on (in a 0700 directory)")
    parser.add_argument(
        "--linger", type=float, help="no owner: exit after SECONDS without a holder or child"
    )
    args = parser.parse_args(argv)
    ident = identity()  # before the defaults below and the imports
    single_threaded_pools()
    launcher = Launcher(
        args.socket, ident, args.linger
    )  # bound now: early requests wait for the imports
    launcher.install_signals()
    missing = preload()
    print(json.dumps({"ready": True, "pid": os.getpid(), "missing": missing}), flush=True)
    os.dup2(2, 1)  # nobody reads stdout after the ready line
    launcher.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
