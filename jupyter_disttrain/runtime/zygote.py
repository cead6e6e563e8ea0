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

A request whose job asks for libraries imported ahead (``DISTRAIN_WARM``) is
passed, connection and all, to a warm child of the launcher kept for those
libraries (:mod:`.warmchild`), so the launcher itself never imports one job's
library for every other job to find.

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
terminated and the launcher exits: a job never outlives its owner. With
``--remove-folder`` the socket's folder is the launcher's alone, and it removes
that folder as it exits: an owner killed while the launcher shut its jobs down
(a kernel past its shutdown grace) leaves nothing behind.

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
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from typing import Any

from . import warmchild
from .forked import preload, redirect, run_agent, run_worker, single_threaded_pools, watch_lifeline
from .launcher_identity import (
    apply_sys_path,
    changed_since,
    identity,
    imported_from,
    peer_uid,
    send,
    thread_count,
)
from .warm import Warmed
from .warmchild import WarmChild

GRACE_SECONDS = 3.0


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
    #: Imports the libraries a job asks for itself (a launcher of one job); otherwise
    #: hands that job's requests to a warm child that does (:mod:`.warmchild`).
    warm_in_place = False

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
        umask = os.umask(0o177)  # bound 0600: no one finds it with a wider mode
        try:
            self.listener.bind(path)
        finally:
            os.umask(umask)
        self.listener.listen(256)
        self.children: dict[int, socket.socket] = {}
        self.child_groups: dict[int, int] = {}
        self.groups: set[int] = set()
        self.popen: dict[int, subprocess.Popen[bytes]] = {}
        self.doomed: dict[int, float] = {}  # process group -> when it gets SIGKILL
        self.wake_r, self.wake_w = _wake_pipe()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        if linger is None and self.owned:
            self.selector.register(sys.stdin, selectors.EVENT_READ, "owner")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.running = True
        #: The libraries imported ahead for the jobs that asked (:mod:`.warm`).
        self.warmed = Warmed()
        #: Its warm children (retired ones too, until they end).
        self.warm_children: list[WarmChild] = []
        #: In a warm child: its end of the socket pair to its launcher.
        self.launcher_channel: socket.socket | None = None
        #: In a warm child: told to retire; the file found changed since it imported.
        self.retired = False
        self.stale: str | None = None
        #: In a warm child: the modules it was forked with; the job it last checked files for.
        self.inherited: frozenset[str] = frozenset()
        self.checked_run: str | None = None

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
                elif key.data == "launcher":
                    warmchild.from_launcher(self)
                elif isinstance(key.data, WarmChild):
                    warmchild.from_child(self, key.data)
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
            self.unwatch(conn)
            self.holders.discard(conn)
            conn.close()

    def retire_when_idle(self) -> None:
        """Lingering: exit (socket unlinked first, under its lock) once idle for ``linger``;
        a retired warm child: exit once its processes have."""
        if self.launcher_channel is not None and self.retired and not self.children:
            self.running = False
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
        self.unwatch(conn)
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

    def unwatch(self, conn: socket.socket) -> None:
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
            self.dispatch(conn, read_request(conn))
        except Exception as exc:
            send(conn, {"error": f"{type(exc).__name__}: {exc}"})
            conn.close()

    def dispatch(self, conn: socket.socket, request: dict[str, Any]) -> None:
        """Serve one request that came on ``conn``; raise for one it cannot serve."""
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
        if warmchild.hand_off(self, conn, req, env):
            return
        pgid = int(req.get("pgid", 0))
        if self.warm_in_place:
            self.warmed.request(env)
        # no fork in a threaded process, for a job the imports ahead mislead, or of old code
        if thread_count() > 1 or self.warmed.refusal(env) or self.stale:
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
        self.flush_output()
        pid = os.fork()
        if pid == 0:
            self._become_child(pgid, env, req.get("cwd"), keep=None)
            os.environ["DISTRAIN_PGID"] = str(os.getpgid(0))  # its workers join the group
            redirect(req["log"])
            os._exit(run_agent(argv))
        self._register(conn, pid, pgid, forked=True)
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def start_worker(self, conn: socket.socket, req: dict[str, Any]) -> None:
        threads = thread_count()
        if threads > 1:
            raise RuntimeError(f"launcher has {threads} threads; not forking")
        env = {str(k): str(v) for k, v in req["env"].items()}
        if warmchild.hand_off(self, conn, req, env):
            return
        if self.warm_in_place:
            self.warmed.request(env)
        if refused := self.warmed.refusal(env):
            raise RuntimeError(refused)
        if self.stale:
            raise RuntimeError(f"{self.stale} changed since it was imported; not forking")
        pgid = int(req.get("pgid", 0))
        self.flush_output()
        pid = os.fork()
        if pid == 0:
            self._become_child(pgid, env, req.get("cwd"), keep=conn)
            watch_lifeline(conn)
            os._exit(run_worker([str(a) for a in req["argv"]], env, self.loopback_stores))
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
        self._close_inherited(keep)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        apply_sys_path(env)

    def _close_inherited(self, keep: socket.socket | None) -> None:
        """In a forked process: close the launcher's selector (closed, never changed: the
        epoll instance is shared, so the launcher's registrations stand), socket, wake-up
        pipe and every connection it holds but ``keep``."""
        self.selector.close()
        self.listener.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        channels = [c.channel for c in self.warm_children]
        if self.launcher_channel is not None:
            channels.append(self.launcher_channel)
        for conn in [*self.children.values(), *self.holders, *channels]:
            if conn is not keep:
                conn.close()

    def fork_warm_child(
        self, modules: tuple[str, ...], handling: socket.socket
    ) -> WarmChild | None:
        """Fork the warm child for ``modules`` (None in a threaded process: no fork); the
        connection the launcher is ``handling`` reaches the child as the others do: passed."""
        if thread_count() > 1:
            return None
        ours, theirs = socket.socketpair()
        self.flush_output()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                handling.close()
                self.become_warm_child(theirs)
                self.serve()
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                self.flush_output()
                os._exit(code)
        theirs.close()
        child = WarmChild(modules, pid, ours)
        self.warm_children.append(child)
        self.selector.register(ours, selectors.EVENT_READ, child)
        return child

    def become_warm_child(self, channel: socket.socket) -> None:
        """In the forked warm child: none of the launcher's connections, children or
        socket (never unlinked here), a selector and wake-up pipe of its own (the
        inherited epoll instance is the launcher's), the launcher's channel its owner."""
        self._close_inherited(keep=None)
        for table in (self.children, self.child_groups, self.popen, self.doomed):
            table.clear()
        self.groups.clear()
        self.holders.clear()
        self.warm_children.clear()
        self.linger = None
        self.withdrawn = True
        self.warm_in_place = True
        self.started = time.time()  # a file changed after this is one it may have imported
        self.inherited = frozenset(sys.modules)
        self.launcher_channel = channel
        self.wake_r, self.wake_w = _wake_pipe()
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(channel, selectors.EVENT_READ, "launcher")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")

    @staticmethod
    def flush_output() -> None:
        sys.stdout.flush()
        sys.stderr.flush()

    # -- children ----------------------------------------------------------
    def reap(self) -> None:
        """Collect ended children and tell their requesters how they ended."""
        while True:  # a warm child too, forgotten already when its channel ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for child in [c for c in self.warm_children if c.pid == pid]:
                warmchild.forget_child(self, child)
            conn = self.children.pop(pid, None)
            self.child_groups.pop(pid, None)
            proc = self.popen.pop(pid, None)
            if proc is not None:
                proc.returncode = os.waitstatus_to_exitcode(status)
            if conn is None:
                continue
            self.unwatch(conn)
            if os.WIFSIGNALED(status):
                send(conn, {"signal": os.WTERMSIG(status)})
            else:
                send(conn, {"exit": os.WEXITSTATUS(status)})
            conn.close()

    def shutdown(self) -> None:
        """Terminate every process group started here (and, by ending their channel, the
        warm children's), then leave."""
        children = [c.pid for c in self.warm_children]
        for child in list(self.warm_children):
            warmchild.forget_child(self, child)
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
        warmchild.await_ended(children, GRACE_SECONDS + 2.0)
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


def _wake_pipe() -> tuple[int, int]:
    """A non-blocking pipe: the signal wake-up descriptor's, read by ``select``."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    return read, write


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except OSError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``zygote SOCKET [--linger SECONDS] [--remove-folder]``; prints ``ready``
    once it serves."""
    parser = argparse.ArgumentParser(prog="python -m jupyter_disttrain.runtime.zygote")
    parser.add_argument("socket", help="the Unix socket to serve on (in a 0700 directory)")
    parser.add_argument(
        "--linger", type=float, help="no owner: exit after SECONDS without a holder or child"
    )
    parser.add_argument(
        "--remove-folder",
        action="store_true",
        help="the socket's folder was made for this launcher alone: remove it at exit",
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
    launcher.serve()  # its forks never return here: they end in os._exit
    if args.remove_folder:
        shutil.rmtree(os.path.dirname(os.path.abspath(args.socket)), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
