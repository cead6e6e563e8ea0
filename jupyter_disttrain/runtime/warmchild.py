"""A launcher's warm children: one per set of libraries that jobs ask to have imported ahead.

A launcher serves many jobs, one after another and from several kernels. A
library one job had imported into it would be found imported by every later
job forked from it, including one that means to import another copy (a folder
its cell puts first on ``sys.path``). So a launcher shared by jobs imports no
job's library itself: a request whose environment asks for some
(:data:`.warm.ENV_WARM`) is handed, with the requester's connection
(``SCM_RIGHTS``), to a child forked from the launcher for that set of modules.
The child imports them (:class:`.warm.Warmed`) and serves the request as the
launcher would have: it forks the process, answers on the connection and
reaps it. Only a launcher dedicated to one job (a pod's) imports them itself.

The launcher and each child talk over a socket pair, in messages of an 8-byte
length followed by that many bytes of JSON:

* launcher to child: ``{"op": "handoff", "request": R}``, with the requester's
  connection attached to its header; ``{"op": "retire"}``: nothing more comes,
  end once your processes have.
* child to launcher: ``{"op": "stale", "file": F}``: ``F`` changed since the child
  imported it, so it forks no more processes and new requests need a new child.

The end of the socket pair is each side's news of the other's end: a child
whose launcher ended ends its jobs, as the launcher would have. The launcher
writes a handoff whole: one larger than the socket's buffer (an environment of
hundreds of kilobytes) waits for the child to read it, at most as long as the
child's first imports take.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol

from .env import ENV_RUN_ID
from .launcher_identity import changed_since, send
from .warm import Warmed

HEADER = struct.Struct("!Q")
#: The largest message either side reads (a request is at most 4 MiB, see ``zygote``).
MAX_MESSAGE = 1 << 23


@dataclass(eq=False)
class WarmChild:
    """The launcher's view of one warm child."""

    #: The modules it imports ahead for the jobs it serves.
    modules: tuple[str, ...]
    pid: int
    #: The launcher's end of the socket pair.
    channel: socket.socket
    #: Told to retire: it gets no more requests.
    retired: bool = False


class Host(Protocol):
    """What the functions here use of the launcher they serve (``zygote.Launcher``)."""

    #: Imports what a job asks for itself (a pod's launcher, a warm child).
    warm_in_place: bool
    warmed: Warmed
    warm_children: list[WarmChild]
    #: In a warm child: its end of the socket pair to its launcher.
    launcher_channel: socket.socket | None
    retired: bool
    stale: str | None
    #: In a warm child: the modules it was forked with; the job it last checked its files for.
    inherited: frozenset[str]
    checked_run: str | None
    running: bool
    started: float

    def dispatch(self, conn: socket.socket, request: dict[str, Any]) -> None:
        """Serve one request that came on ``conn``; raise for one it cannot serve."""

    def unwatch(self, conn: socket.socket) -> None:
        """Stop selecting on ``conn``."""

    def fork_warm_child(
        self, modules: tuple[str, ...], handling: socket.socket
    ) -> WarmChild | None:
        """The new warm child for ``modules``; None where none can be forked."""


def send_message(sock: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    """Write one message; ``fd`` (a connection to pass on) travels with its header."""
    body = json.dumps(message).encode()
    header = HEADER.pack(len(body))
    if fd is None:
        sock.sendall(header + body)
        return
    socket.send_fds(sock, [header], [fd])
    sock.sendall(body)


def recv_message(sock: socket.socket) -> tuple[dict[str, Any], socket.socket | None] | None:
    """Read one message and the connection that came with it; None at the other side's end.

    Reads exactly the message's bytes, so a descriptor sent with the next one is never
    consumed here; an end in the middle of a message is the other side's end too. Raises
    ``ValueError`` for a message that is not a JSON object.
    """
    data, fds, _flags, _address = socket.recv_fds(sock, HEADER.size, 1)
    passed = socket.socket(fileno=fds[0]) if fds else None
    header = _exactly(sock, data, HEADER.size)
    length = HEADER.unpack(header)[0] if header is not None else 0
    if length > MAX_MESSAGE:
        raise ValueError(f"message of {length} bytes")
    body = _exactly(sock, b"", length) if header is not None else None
    if body is None:
        if passed is not None:
            passed.close()
        return None
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("message must be a JSON object")
    return message, passed


def _exactly(sock: socket.socket, data: bytes, count: int) -> bytes | None:
    """``data`` read on to ``count`` bytes; None when the other side ends first."""
    while len(data) < count:
        chunk = sock.recv(min(count - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


def hand_off(launcher: Host, conn: socket.socket, req: dict[str, Any], env: dict[str, str]) -> bool:
    """Pass a request whose job asks for libraries ahead to the warm child for them
    (forked now if none serves them); False when this launcher serves it itself."""
    modules = () if launcher.warm_in_place else launcher.warmed.wanted(env)
    if not modules:
        return False
    found = [c for c in launcher.warm_children if c.modules == modules and not c.retired]
    child = found[0] if found else launcher.fork_warm_child(modules, conn)
    if child is None:
        return False  # served here, cold: the job's processes import what they need
    try:
        send_message(child.channel, {"op": "handoff", "request": req}, conn.fileno())
    except OSError:
        forget_child(launcher, child)
        return False
    conn.close()
    return True


def from_launcher(launcher: Host) -> None:
    """In a warm child: serve the request the launcher passed, or retire; at the
    launcher's end, end (and with it every process this child started)."""
    assert launcher.launcher_channel is not None
    try:
        got = recv_message(launcher.launcher_channel)
    except (OSError, ValueError):
        got = None
    if got is None:
        launcher.running = False
        return
    message, conn = got
    request = message.get("request")
    if message.get("op") == "retire":
        launcher.retired = True
    if conn is None or message.get("op") != "handoff" or not isinstance(request, dict):
        if conn is not None:
            conn.close()
        return
    env = request.get("env")
    if request.get("op") == "agent" and not launcher.stale and isinstance(env, dict):
        check_files(launcher, env)
    try:
        launcher.dispatch(conn, request)
    except Exception as exc:
        send(conn, {"error": f"{type(exc).__name__}: {exc}"})
        conn.close()


def check_files(launcher: Host, env: dict[str, Any]) -> None:
    """In a warm child, before it forks an agent: has a file of a module it imported since
    it was forked (the launcher's own are the launcher's to check) changed since? Then say
    so to the launcher: this child forks no more. Checked once a job (its agents share
    ``DISTRAIN_RUN_ID``, new at every submission): a check reads the status of a file per
    module, thousands for Lightning."""
    run = str(env.get(ENV_RUN_ID) or "")
    if run and run == launcher.checked_run:
        return
    launcher.checked_run = run
    own = [m for name, m in list(sys.modules.items()) if name not in launcher.inherited]
    launcher.stale = changed_since(launcher.started, own)
    if launcher.stale:  # its jobs fork here no more: the launcher forks a new child
        with contextlib.suppress(OSError):
            assert launcher.launcher_channel is not None
            send_message(launcher.launcher_channel, {"op": "stale", "file": launcher.stale})


def from_child(launcher: Host, child: WarmChild) -> None:
    """A warm child's message: on ``stale``, retire it (new requests get a new one)."""
    try:
        got = recv_message(child.channel)
    except (OSError, ValueError):
        got = None
    if got is None:
        forget_child(launcher, child)
        return
    message, conn = got
    if conn is not None:
        conn.close()
    if message.get("op") == "stale" and not child.retired:
        child.retired = True
        print(
            f"distrain launcher: {message.get('file')} changed since the libraries "
            f"{', '.join(child.modules)} were imported ahead; importing them anew",
            file=sys.stderr,
        )
        with contextlib.suppress(OSError):
            send_message(child.channel, {"op": "retire"})


def forget_child(launcher: Host, child: WarmChild) -> None:
    """A warm child ended (or cannot be reached): no more requests go to it."""
    if child in launcher.warm_children:
        launcher.warm_children.remove(child)
        launcher.unwatch(child.channel)
        child.channel.close()


def await_ended(pids: list[int], timeout: float) -> None:
    """Reap the warm children ``pids`` (told to end) within ``timeout``; SIGKILL the rest."""
    deadline = time.monotonic() + timeout
    waiting = set(pids)
    while waiting:
        for pid in list(waiting):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                waiting.discard(pid)
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in waiting:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
