"""A launcher that outlives the kernel that started it, for this user's next kernels.

Without a Jupyter server's warm launcher, every new kernel (a restart, a
second notebook, each ``disttrain run``) would start a launcher of its own and
wait for it to import torch again. Instead, the first one starts a *lingering*
launcher (``zygote SOCKET --linger SECONDS``) and every process of this user
and Python environment then shares it: it holds the launcher through one open
connection (``hold``) for as long as it lives, and the launcher exits once it
has had no holder and no job for ``SECONDS``.

Its socket is ``distrain/launcher-<environment digest>.sock`` in Jupyter's
runtime directory (the ``distrain`` folder made 0700), so processes of another Python
environment or import-time variables get another one, and
:func:`~jupyter_disttrain.runtime.launcher_identity.check_private` and the
peer's user id guard it like the server's. A process looks it up and starts it
under an exclusive ``flock`` of ``SOCKET.lock``, the lock the launcher takes
to exit (see :mod:`jupyter_disttrain.runtime.zygote`): two kernels starting at
once share one launcher, and none connects to one that is leaving.

Jobs still end with the process that submitted them: each agent's request
connection is its lifeline, as in the server's launcher.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...runtime.launcher_identity import ask, check_private, connect_own, identity

#: Seconds a lingering launcher waits, idle, for another kernel (``DistrainMagics.linger``).
DEFAULT_LINGER = 600.0
#: Overrides the default linger of every process it reaches (``0``: none lingers).
ENV_LINGER = "DISTRAIN_LINGER"
PREFIX = "launcher-"
#: AF_UNIX paths longer than this cannot be bound (108 bytes with the terminator).
MAX_SOCKET_PATH = 100
START_TIMEOUT = 30.0
READY_TIMEOUT = 120.0


def default_linger() -> float:
    """``DISTRAIN_LINGER`` when set to a number of seconds, else :data:`DEFAULT_LINGER`."""
    try:
        return max(0.0, float(os.environ[ENV_LINGER]))
    except (KeyError, ValueError):
        return DEFAULT_LINGER


def runtime_dir() -> Path:
    """This user's folder of lingering launchers: ``distrain`` in Jupyter's runtime directory
    (``JUPYTER_RUNTIME_DIR`` when set)."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / "distrain"


def socket_path(folder: Path | None = None, ident: dict[str, Any] | None = None) -> str | None:
    """The lingering launcher's socket for the environment of ``ident`` (this process's
    :func:`identity` by default); None when too long to bind."""
    chosen = identity() if ident is None else ident
    digest = hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()
    path = str((folder or runtime_dir()) / f"{PREFIX}{digest[:16]}.sock")
    return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH else None


@dataclass
class Held:
    """This process's hold on a lingering launcher: close :attr:`conn` to let go."""

    path: str
    conn: socket.socket
    answer: dict[str, Any]
    proc: subprocess.Popen[bytes] | None  # set when this process started it


def hold(linger: float, folder: Path | None = None, ident: dict[str, Any] | None = None) -> Held:
    """Hold the lingering launcher of the environment of ``ident`` (this process's
    :func:`identity` by default), starting it when there is none: one started here gets
    exactly this process's ``os.environ``.

    Blocks until it has imported (a launcher just started imports torch first).
    Raises ``OSError`` (``PermissionError`` for a socket or folder that is not
    this user's alone) or ``ValueError`` when no launcher can be held.
    """
    path = socket_path(folder, ident)
    if path is None:
        raise ValueError(
            f"{runtime_dir() if folder is None else folder} is too long a path for a Unix "
            "socket; set JUPYTER_RUNTIME_DIR to a shorter one"
        )
    _private_dir(os.path.dirname(path))
    proc = None
    with _locked(path + ".lock"):
        conn = _connect(path)
        if conn is None:
            proc = _start(path, linger)
            conn = _await_socket(path, proc)
        conn.sendall(b'{"op": "hold"}\n')
    try:
        conn.settimeout(READY_TIMEOUT)
        line = conn.makefile("rb").readline()
        conn.settimeout(None)
        answer = json.loads(line or b"{}")
    except (OSError, ValueError):
        conn.close()
        raise
    if not isinstance(answer, dict) or not isinstance(answer.get("pid"), int):
        conn.close()
        raise ValueError(f"the lingering launcher at {path} did not answer")
    return Held(path, conn, answer, proc)


def _private_dir(folder: str) -> None:
    """Make ``folder`` (0700) if missing; ``PermissionError`` unless it is this user's alone."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a directory of this user with mode 0700")


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _connect(path: str, remove_stale: bool = True) -> socket.socket | None:
    """A connection to the launcher at ``path``; None when none serves there.

    ``remove_stale`` (only under the lock): unlink a socket nobody serves on.
    """
    if not os.path.lexists(path):
        return None
    check_private(path)
    try:
        return connect_own(path)
    except (ConnectionRefusedError, FileNotFoundError):
        if remove_stale:
            os.unlink(path)  # its launcher was killed before it could remove it
        return None


def _start(path: str, linger: float) -> subprocess.Popen[bytes]:
    log_fd = os.open(path[: -len(".sock")] + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_disttrain.runtime.zygote",
                path,
                "--linger",
                str(linger),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_fd,
            cwd=os.path.dirname(path),
            env=dict(os.environ),  # what identity() read, not the C library's environ
            start_new_session=True,
        )
    finally:
        os.close(log_fd)


def _await_socket(path: str, proc: subprocess.Popen[bytes]) -> socket.socket:
    """Connect once the new launcher listens on its socket (before its imports).

    A refused connection means it has bound the path but not yet called ``listen``:
    the path is its, so it stays (removed, the launcher would listen where nobody finds it).
    """
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ValueError(f"the lingering launcher exited with code {proc.returncode}")
        if os.path.exists(path):
            conn = _connect(path, remove_stale=False)
            if conn is not None:
                return conn
        time.sleep(0.01)
    proc.kill()
    raise ValueError(f"the lingering launcher did not bind {path} in {START_TIMEOUT:.0f} s")


def lingering(folder: Path | None = None) -> list[dict[str, Any]]:
    """This user's lingering launchers in ``folder``: each one's ping answer and socket."""
    found = []
    for path in sorted((folder or runtime_dir()).glob(f"{PREFIX}*.sock")):
        try:
            conn = _connect(str(path), remove_stale=False)
            if conn is None:
                continue
            with conn:
                answer = ask(conn, "ping", 10.0)
        except (OSError, ValueError):
            continue
        if isinstance(answer.get("pid"), int):
            found.append({**answer, "socket": str(path)})
    return found


def stop_lingering(folder: Path | None = None) -> list[int]:
    """End this user's lingering launchers in ``folder`` (their jobs too); their pids."""
    stopped = []
    for launcher in lingering(folder):
        with contextlib.suppress(OSError):
            os.kill(int(launcher["pid"]), signal.SIGTERM)
            stopped.append(int(launcher["pid"]))
    return stopped
