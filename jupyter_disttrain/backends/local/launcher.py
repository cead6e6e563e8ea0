"""The owner's side of the local launcher (``runtime/zygote.py``).

One launcher process per owner (kernel or ``disttrain`` command), started
early in the background so that its torch import overlaps with the user's
typing. The owner holds the launcher's stdin: when the owner exits, however
it exits, the launcher terminates every job it started.

A Jupyter server with this package's extension starts one launcher when it
starts (:mod:`jupyter_disttrain.server.warm`) and names its socket to the
kernels it starts in ``DISTRAIN_WARM_LAUNCHER``. A kernel uses that
launcher (a :class:`SharedLauncher`) when the socket is private (this user's,
0600 in a 0700 directory, the peer of this user id) and the launcher's
identity (:mod:`jupyter_disttrain.runtime.launcher_identity`: interpreter
environment and the variables read at import) is the kernel's own. Without
one, it holds this user's lingering launcher (:mod:`.lingering`), started by
whichever process needed it first, unless its ``linger`` is 0; otherwise it
starts its own :class:`Launcher`. The jobs a kernel runs in a shared launcher
end with the kernel all the same: each agent's request connection is its
lifeline.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...runtime.launcher_identity import (
    ask,
    check_private,
    connect_own,
    difference,
    differing_modules,
    identity,
)
from ...runtime.socketdir import no_socket_folder, private_socket_path
from . import lingering

READY_TIMEOUT = 120.0
ZYGOTE = "jupyter_disttrain.runtime.zygote"
#: A launcher's own folder (``distrain-`` + random, 0700) and the socket in it.
FOLDER_PREFIX, SOCKET_NAME = "distrain-", "launcher.sock"
#: Names the socket of the Jupyter server's warm launcher to the kernels it starts.
ENV_WARM = "DISTRAIN_WARM_LAUNCHER"


class LauncherError(RuntimeError):
    """The launcher could not start or answer."""


#: The launchers this process started and has not closed; guarded by ``_started_lock``.
_started: list[Launcher] = []
_started_lock = threading.Lock()
_exiting = False


@dataclass
class ProcessHandle:
    """A process the launcher started; :meth:`poll` reads its ending when it comes."""

    pid: int
    pgid: int
    forked: bool
    conn: socket.socket
    code: int | None = None
    #: The launcher closed the connection without saying how the process ended.
    eof: bool = False

    def poll(self) -> int | None:
        """The exit code (negative signal number when killed), None while it runs."""
        if self.code is not None:
            return self.code
        try:
            self.conn.setblocking(False)
            data = self.conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        if not data:
            self.eof = True
            self.code = -9 if not _alive(self.pid) else None
            return self.code
        message = json.loads(data.decode().splitlines()[0])
        self.code = -int(message["signal"]) if "signal" in message else int(message["exit"])
        self.conn.close()
        return self.code


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


class Launcher:
    """A running launcher process and its socket."""

    def __init__(self, log_path: Path | None = None) -> None:
        self._ready = threading.Event()
        self._error: str | None = None
        self._reader = threading.Thread(
            target=self._await_ready, name="distrain-launcher", daemon=True
        )
        with _started_lock:  # this process's exit closes it, whichever thread started it
            if _exiting:
                raise LauncherError("this process is exiting: no launcher starts now")
            path = private_socket_path(FOLDER_PREFIX, SOCKET_NAME)
            if path is None:
                raise LauncherError(no_socket_folder(FOLDER_PREFIX, SOCKET_NAME))
            self.socket_path = path
            self._dir = os.path.dirname(path)
            try:
                with open(log_path or os.path.join(self._dir, "launcher.log"), "ab") as log:
                    self.proc = subprocess.Popen(
                        [sys.executable, "-m", ZYGOTE, "--remove-folder", self.socket_path],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                        start_new_session=True,
                    )
            except BaseException:
                shutil.rmtree(self._dir, ignore_errors=True)
                raise
            _started.append(self)
            self._reader.start()  # read from before this process's exit can close it

    def _await_ready(self) -> None:
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline()
            info = json.loads(line)
            if not info.get("ready"):
                raise ValueError(line)
        except ValueError:
            self._error = f"launcher did not start (exit code {self.proc.poll()})"
        self._ready.set()

    @property
    def pid(self) -> int:
        """The launcher's process id."""
        return self.proc.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Block until the launcher serves; raise :class:`LauncherError` if it cannot."""
        if not self._ready.wait(timeout):
            raise LauncherError(f"launcher not ready after {timeout:.0f} s")
        if self._error:
            raise LauncherError(self._error)

    def alive(self) -> bool:
        """True while the launcher process runs."""
        return self.proc.poll() is None

    def request(self, message: dict[str, Any]) -> ProcessHandle:
        """Send a fork request; the handle reports the process's ending."""
        self.wait_ready()
        return request(self.socket_path, message)

    def close(self) -> None:
        """End the launcher and, with it, every job it started (one still importing has
        started none: it is killed rather than waited for)."""
        if not self._ready.is_set() and self.proc.poll() is None:
            self.proc.kill()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # the ready line's reader ends at the launcher's end (its stdout's end of file); its
        # stream is closed after it, never under it
        if self._reader.ident is not None:
            self._reader.join(5)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        with _started_lock:
            if self in _started:
                _started.remove(self)


def request(path: str, message: dict[str, Any]) -> ProcessHandle:
    """Send a fork request to the launcher at ``path``; the handle reports the ending."""
    try:
        conn = connect_own(path)
    except OSError as exc:
        raise LauncherError(f"cannot reach the launcher: {exc}") from exc
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    except OSError as exc:
        conn.close()
        raise LauncherError(f"launcher did not answer: {exc}") from exc
    first, _, rest = reply.partition(b"\n")
    answer = json.loads(first or b"{}")
    if "pid" not in answer:
        conn.close()
        raise LauncherError(str(answer.get("error", "no answer")))
    handle = ProcessHandle(int(answer["pid"]), int(answer["pgid"]), bool(answer["forked"]), conn)
    if rest.strip():
        ending = json.loads(rest.splitlines()[0])
        handle.code = -int(ending["signal"]) if "signal" in ending else int(ending["exit"])
    return handle


def ping(path: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
    """The launcher's answer to ``ping`` (pid, threads, identity); waits while it imports."""
    with connect_own(path, timeout) as conn:
        return ask(conn, "ping", timeout)


class SharedLauncher:
    """A launcher this process uses but does not own: the Jupyter server's, or a lingering one."""

    def __init__(
        self,
        socket_path: str,
        pid: int,
        modules: dict[str, str] | None = None,
        whose: str = "the Jupyter server's warm launcher",
        held: lingering.Held | None = None,
    ) -> None:
        self.socket_path = socket_path
        self._pid = pid
        #: The modules it imported: name -> file (see ``launcher_identity.imported_from``).
        self.modules = modules or {}
        #: Names it in what is said to the user.
        self.whose = whose
        self._held = held

    @property
    def pid(self) -> int:
        """The launcher's process id."""
        return self._pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """It answered a ping already: ready."""
        if not self.alive():
            raise LauncherError(f"{self.whose} has ended")

    def alive(self) -> bool:
        """True while the launcher process runs and its socket is there."""
        started = self._held.proc if self._held is not None else None
        if started is not None and started.poll() is not None:
            return False  # this process started it and has reaped it
        return _alive(self._pid) and os.path.exists(self.socket_path)

    @property
    def held(self) -> bool:
        """True for the lingering launcher, which this process holds until :meth:`close`."""
        return self._held is not None

    def request(self, message: dict[str, Any]) -> ProcessHandle:
        """Send a fork request; the handle reports the process's ending."""
        return request(self.socket_path, message)

    def close(self) -> None:
        """Let go of it (it is not this process's to end; this process's jobs end with it)."""
        if self._held is not None:
            self._held.conn.close()


def server_launcher(env: dict[str, str] | None = None) -> SharedLauncher | None:
    """The Jupyter server's launcher when this process may share it, else None."""
    path = (os.environ if env is None else env).get(ENV_WARM)
    if not path:
        return None
    try:
        check_private(path)
        answer = ping(path)
    except (OSError, ValueError, LauncherError):
        return None
    if answer.get("identity") != identity() or not isinstance(answer.get("pid"), int):
        return None
    if _outdated(answer, "the Jupyter server's warm launcher"):
        return None
    modules = answer.get("modules")
    if not isinstance(modules, dict):
        return None  # a launcher that does not say what it imported cannot be checked
    return SharedLauncher(path, int(answer["pid"]), _modules(modules))


def lingering_launcher(linger: float) -> SharedLauncher | None:
    """This user's lingering launcher, held (started if needed); None when ``linger`` is 0
    or none can be held (the reason goes to stderr)."""
    if linger <= 0:
        return None
    ours = identity()  # once: the socket chosen and the launcher checked against one value
    try:
        held = lingering.hold(linger, ident=ours)
        if _outdated(held.answer, "the lingering launcher"):
            held.conn.close()  # it has unlinked its socket: the next one starts afresh
            held = lingering.hold(linger, ident=ours)
    except (OSError, ValueError) as exc:
        print(
            f"distrain: no lingering launcher ({exc}); starting this process's own", file=sys.stderr
        )
        return None
    modules = held.answer.get("modules")
    theirs = held.answer.get("identity")
    differs = difference(ours, theirs) if isinstance(theirs, dict) else "it has no identity"
    if differs or not isinstance(modules, dict):
        held.conn.close()
        why = differs or "it does not say what it imported"
        print(
            f"distrain: the lingering launcher at {held.path} cannot serve this process ({why}); "
            "starting this process's own",
            file=sys.stderr,
        )
        return None
    whose = "the lingering launcher"
    return SharedLauncher(held.path, int(held.answer["pid"]), _modules(modules), whose, held)


def _outdated(answer: dict[str, Any], whose: str) -> bool:
    """True (and said once) when the launcher that gave ``answer`` imported a file that
    changed since: forking from it would run the old code."""
    changed = answer.get("changed")
    if not changed:
        return False
    if str(changed) not in _told:
        _told.add(str(changed))
        print(
            f"distrain: {changed} changed after {whose} imported it: this kernel's jobs "
            "start in a new launcher (the first one takes a few seconds longer)",
            file=sys.stderr,
        )
    return True


def _modules(answer: dict[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in answer.items()}


AnyLauncher = Launcher | SharedLauncher
_shared: AnyLauncher | None = None
_own: Launcher | None = None  # when this kernel's sys.path stopped matching the server's
_told: set[str] = set()
_lock = threading.Lock()


def shared_launcher(linger: float | None = None) -> AnyLauncher:
    """This process's launcher for its next job: the server's when it may share it, else
    the lingering one (``linger`` seconds, default :func:`lingering.default_linger`; 0:
    none), else its own.

    Chosen on first use (again if the chosen one died, and when ``linger`` is 0
    while it holds the lingering one: that lets go of it). A shared one is checked
    again at every job against this process's ``sys.path`` as it is now: when
    that would import another file for a module the shared launcher has
    imported (a folder put first on ``sys.path`` since), the job runs in a
    launcher of this process's own, and the difference is said once.
    """
    global _shared, _own
    if linger is None:
        linger = lingering.default_linger()
    with _lock:
        let_go = linger <= 0 and isinstance(_shared, SharedLauncher) and _shared.held
        if _shared is None or let_go or not _shared.alive():
            if _shared is not None:
                _shared.close()
            _shared = server_launcher() or lingering_launcher(linger) or Launcher()
        if not isinstance(_shared, SharedLauncher):
            return _shared
        differing = differing_modules(_shared.modules, list(sys.path))
        if not differing:
            return _shared
        _say_once(differing, _shared)
        if _own is None or not _own.alive():
            _own = Launcher()
        return _own


def _say_once(differing: dict[str, str], theirs: SharedLauncher) -> None:
    name = next(iter(differing))
    if name in _told:
        return
    _told.update(differing)
    print(
        f"distrain: this kernel's sys.path imports {name} from {differing[name]}, not "
        f"{theirs.modules[name]} as {theirs.whose} did: its jobs start in a "
        "launcher of this kernel's own (the first one takes a few seconds longer)",
        file=sys.stderr,
    )


def prewarm(linger: float | None = None) -> None:
    """Choose (or start) the launcher now, in the background, so the first job is fast."""
    threading.Thread(target=_prewarm, args=(linger,), name="distrain-prewarm", daemon=True).start()


def _prewarm(linger: float | None) -> None:
    try:
        shared_launcher(linger)
    except LauncherError:
        if not _exiting:  # one refused because this process exits has nothing to say
            raise


@atexit.register
def _close_shared() -> None:
    """At exit: let go of a shared launcher and end every launcher this process started
    (also one a background thread was starting: its folder is removed with it)."""
    global _exiting
    with _started_lock:
        _exiting = True
        owned = list(_started)
    if isinstance(_shared, SharedLauncher):
        _shared.close()
    for launcher in owned:
        launcher.close()
