"""The worker command torchrun starts when the local launcher is available.

``python -S .../runtime/forkclient.py PAYLOAD`` (run as a script, so that its
start imports no package, only a few standard library modules) asks the launcher
(Unix socket in ``DISTRAIN_LAUNCHER``) to fork a warm worker with this
process's environment, then stands in for it: signals it receives are
forwarded, and it exits the way the worker exited, so torchrun's agent
supervises it exactly like a worker it started itself. An agent the launcher
forked asks for its workers itself (:mod:`.launcher_handle`) and runs this
command only when the launcher would not fork. If the launcher cannot
fork (not running, no longer single-threaded, or run by another user: the
peer's user id is checked), it becomes the worker with ``exec`` instead: the
module in ``DISTRAIN_FALLBACK_WORKER`` (a pod's launcher sets the plain worker
runtime, see :mod:`.podlaunch`), else the local one.
Standard library only; imports no torch.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import struct
import sys
from types import FrameType
from typing import Any

#: The launcher's socket, set by whoever started it for this process's agent.
ENV_LAUNCHER = "DISTRAIN_LAUNCHER"
#: The module to exec when no worker can be forked (default: :data:`LOCAL_WORKER`).
ENV_FALLBACK = "DISTRAIN_FALLBACK_WORKER"
LOCAL_WORKER = "jupyter_disttrain.runtime.localworker"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_PDEATHSIG = 1


def torchrun_command() -> tuple[str, ...]:
    """The torchrun arguments that make this file each worker's command: run by this
    interpreter without the ``site`` module (this file imports no package of it; a start
    without it takes about 10 ms less), unbuffered."""
    return ("--no-python", sys.executable, "-S", "-u", os.path.abspath(__file__))


def peer_uid(conn: socket.socket) -> int:
    """The user id at the other end of ``conn`` (``launcher_identity.peer_uid``, unimported)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (the agent) dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def fork_request(payload: str, env: dict[str, str]) -> dict[str, Any]:
    """The launcher's request for a worker on ``payload`` with ``env``, from this directory,
    in the process group ``env`` names (``DISTRAIN_PGID``; 0: a group of its own)."""
    return {
        "op": "worker",
        "argv": [payload],
        "env": env,
        "cwd": os.getcwd(),
        "pgid": int(env.get("DISTRAIN_PGID", "0")),
    }


def read_line(conn: socket.socket, received: bytes = b"") -> tuple[bytes, bytes]:
    """The next line from ``conn`` after what was ``received`` already, and what followed
    it (read with it); the line is empty when the connection closed first."""
    while b"\n" not in received:
        try:
            data = conn.recv(4096)
        except InterruptedError:
            continue
        if not data:
            return b"", b""
        received += data
    line, rest = received.split(b"\n", 1)
    return line, rest


def request_fork(
    path: str, payload: str, env: dict[str, str]
) -> tuple[socket.socket, dict[str, Any], bytes] | str:
    """Ask the launcher for a worker on ``payload`` with ``env``: its connection, answer and
    what the launcher said after the answer; or why it cannot give one."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        if peer_uid(conn) != os.getuid():  # not our launcher: start the worker ourselves
            conn.close()
            return "its socket is another user's"
        conn.sendall((json.dumps(fork_request(payload, env)) + "\n").encode())
        line, rest = read_line(conn)
        reply = json.loads(line or b"{}")
    except (OSError, ValueError) as exc:
        conn.close()
        return f"{type(exc).__name__}: {exc}"
    if not isinstance(reply, dict) or "pid" not in reply:
        conn.close()
        error = reply.get("error") if isinstance(reply, dict) else None
        return str(error or "it did not answer")
    return conn, reply, rest


def returncode(line: bytes) -> int:
    """``Popen``'s return code from the launcher's ``{"exit": N}`` or ``{"signal": S}``
    (minus the signal); 1 for anything else."""
    try:
        outcome = json.loads(line)
        if "signal" in outcome:
            return -int(outcome["signal"])
        return int(outcome.get("exit", 1))
    except (ValueError, TypeError, AttributeError):
        return 1


def supervise(conn: socket.socket, pid: int, received: bytes = b"") -> int:
    """Forward signals to the worker until it ends; return (or re-raise) its ending.
    ``received``: what the launcher already said after its answer."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    line, _ = read_line(conn, received)
    if not line:  # launcher gone: take the worker down with us
        forward(signal.SIGKILL, None)
        return 1
    code = returncode(line)
    if code < 0:
        signum = -code
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``forkclient PAYLOAD``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python forkclient.py PAYLOAD", file=sys.stderr)
        return 2
    die_with_parent()
    path = os.environ.get(ENV_LAUNCHER)
    # the worker names the pid torchrun knows (this stand-in's) in its hello
    env = {**os.environ, "DISTRAIN_STANDIN_PID": str(os.getpid())}
    got = request_fork(path, args[0], env) if path else "no launcher was named"
    if not isinstance(got, str):
        return supervise(got[0], int(got[1]["pid"]), got[2])
    if path:  # the agent was forked from a warm launcher: say why this worker starts cold
        print(
            f"distrain: the warm launcher could not fork this worker ({got}); starting a "
            "fresh interpreter instead (it imports torch itself: a slower start)",
            file=sys.stderr,
            flush=True,
        )
    sys.stdout.flush()
    module = os.environ.get(ENV_FALLBACK) or LOCAL_WORKER
    os.execv(sys.executable, [sys.executable, "-u", "-m", module, args[0]])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
