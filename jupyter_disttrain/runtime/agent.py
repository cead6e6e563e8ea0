"""A torchrun node agent whose stores listen on loopback only, and that ends with its owner.

``python -m jupyter_disttrain.runtime.agent ARGV`` is ``torchrun ARGV`` for
local jobs, with two differences. Every TCPStore the agent hosts (the c10d
rendezvous store and the workers' store) listens on 127.0.0.1 (on
``--network isolated``, the node's own address in its namespace) instead of
every address: torch's ``TCPStore`` accepts an already-bound listening
socket (``master_listen_fd``), created here on loopback (the workers do the
same, see :mod:`.localworker`). And an agent started by its owner directly
(``exec`` launch mode: ``DISTRAIN_OWNER_PID`` set) watches the owner: when
it exits, however it exits, the agent stops its workers (SIGTERM, as
torchrun does) and is killed :data:`OWNER_GRACE_SECONDS` later, its workers
with it (they die with their agent). Standard library and torch only.

Loopback is still open to the machine's other users, and torch's c10d
rendezvous keeps its state in the store as a pickle it loads on every sync:
the agent signs that state with the job key (:func:`sign_rendezvous_state`)
and refuses, as a rendezvous error, a state the key did not sign, so a
state another user wrote is never unpickled.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

LOOPBACK = "127.0.0.1"
#: The address a node's stores listen on instead of loopback: its own on ``--network isolated``.
ENV_BIND = "DISTRAIN_BIND_ADDR"
ENV_OWNER = "DISTRAIN_OWNER_PID"
#: After its owner exits, an agent has this long to stop its workers before it is killed.
OWNER_GRACE_SECONDS = 3.0
#: How often a local agent reads the rendezvous state while it waits for the others.
RDZV_POLL_SECONDS = 0.02
#: The c10d rendezvous round a worker runs in, in its environment (:func:`worker_rounds`).
ENV_ROUND = "DISTRAIN_ROUND"

_ARGS = (
    "host_name",
    "port",
    "world_size",
    "is_master",
    "timeout",
    "wait_for_workers",
    "multi_tenant",
    "master_listen_fd",
    "use_libuv",
)


def _listen(port: int) -> int | None:
    """A socket listening on ``port`` of loopback (of ``DISTRAIN_BIND_ADDR`` when set: a node's
    address in its own network namespace), as a file descriptor; None if the port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((os.environ.get(ENV_BIND) or LOOPBACK, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise
    return sock.detach()  # the store owns the descriptor from here on


def bind_stores_to_loopback(agent: bool = True) -> None:
    """Make every TCPStore this process hosts listen on 127.0.0.1 (idempotent).

    ``agent=False`` (a worker) leaves out torchrun's rendezvous backend, which
    a worker does not import.
    """
    import torch.distributed as dist

    base: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's stubs' exports)
    if getattr(base, "_distrain_loopback", False):
        return

    class LoopbackTCPStore(base):  # type: ignore[misc]
        """A TCPStore whose server, when this process hosts one, listens on loopback."""

        _distrain_loopback = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.update(zip(_ARGS, args, strict=False))
            if kwargs.get("is_master") and kwargs.get("master_listen_fd") is None:
                fd = _listen(int(kwargs.get("port") or 0))
                if fd is not None:  # taken: a multi-tenant server of this process reuses it
                    kwargs["master_listen_fd"] = fd
            super().__init__(**kwargs)

    import importlib

    # The rendezvous modules imported the name themselves (``env://`` makes the workers'
    # store); ``torch.distributed.rendezvous`` is also a function's name, hence the import.
    modules = [dist, importlib.import_module("torch.distributed.rendezvous")]
    if agent:
        modules.append(
            importlib.import_module("torch.distributed.elastic.rendezvous.c10d_rendezvous_backend")
        )
    for module in modules:
        setattr(module, "TCPStore", LoopbackTCPStore)  # noqa: B010


def _await_exit(pid: int) -> None:
    """Return once process ``pid`` has exited (a pidfd where there is one, else polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (OSError, AttributeError):
        while os.getppid() == pid:  # the owner is this agent's parent
            time.sleep(0.2)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def watch_owner(owner: int, grace: float = OWNER_GRACE_SECONDS) -> None:
    """When ``owner`` exits: SIGTERM this agent (torchrun stops its workers), later SIGKILL.

    The SIGKILL comes ``grace`` seconds after; the workers die with the agent.

    An owner already gone (this process was reparented before it looked) ends it at once.
    """

    def watch() -> None:
        if os.getppid() == owner:
            _await_exit(owner)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="distrain-owner", daemon=True).start()


def sign_rendezvous_state(key: bytes) -> None:
    """Sign the c10d rendezvous state with ``key`` and check it before torch unpickles it."""
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as c10d
    from torch.distributed.elastic.rendezvous.api import RendezvousStateError

    from . import jobkey

    base: Any = c10d.C10dRendezvousBackend
    if getattr(base, "_distrain_signed", False):
        return

    def checked(pair: tuple[bytes, Any] | None) -> tuple[bytes, Any] | None:
        if pair is None:
            return None
        try:
            return jobkey.unsigned(key, pair[0], purpose="store"), pair[1]
        except jobkey.BadSignature as exc:
            raise RendezvousStateError(f"the rendezvous state in the job's store: {exc}") from None

    class SignedRendezvousBackend(base):  # type: ignore[misc]
        """A c10d rendezvous backend whose state carries the job key's signature."""

        _distrain_signed = True

        def get_state(self) -> tuple[bytes, Any] | None:
            return checked(super().get_state())

        def set_state(self, state: bytes, token: Any = None) -> tuple[bytes, Any, bool] | None:
            mine = jobkey.signed(key, state, purpose="store")
            result = super().set_state(mine, token)
            if result is None:
                return None
            theirs, new_token, _ = result
            pair = checked((theirs, new_token))
            assert pair is not None
            return pair[0], pair[1], theirs == mine

    setattr(c10d, "C10dRendezvousBackend", SignedRendezvousBackend)  # noqa: B010


def fast_rendezvous_polls(poll: float = RDZV_POLL_SECONDS) -> None:
    """Wait ``poll`` seconds between rendezvous state reads, no skew (idempotent).

    torch sleeps one second between reads of the shared state while a node
    waits for the others, serves a read from its cache for one second, and
    sleeps a random 0-0.3 s before the first round, to spread the load of
    many nodes on a remote store; local agents share a loopback store. And
    it names the method of each rendezvous record with ``inspect.stack()``
    (twice), which reads the source file of every frame: tens of
    milliseconds a record, many records a round.
    """
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    current: Any = getattr(dynamic_rendezvous, "_delay")  # noqa: B009 (not exported)
    if getattr(current, "_distrain_poll", None) is not None:
        return

    def delay(seconds: float | tuple[float, float]) -> None:
        if isinstance(seconds, tuple):  # the first round's random skew
            return
        time.sleep(min(seconds, poll))

    delay._distrain_poll = poll  # type: ignore[attr-defined]
    setattr(dynamic_rendezvous, "_delay", delay)  # noqa: B010
    # The state holder serves its cached state for ``cache_duration`` (1 s) after a read.
    holder: Any = dynamic_rendezvous._BackendRendezvousStateHolder
    holder.__init__.__defaults__ = (poll,)

    def method_name(depth: int = 2) -> str:
        """torch's ``get_method_name``, from the frame instead of ``inspect.stack()``."""
        try:
            return sys._getframe(depth).f_code.co_name
        except ValueError:
            return "no_method_name"

    # Called for every rendezvous record; ``inspect.stack()`` reads the source of every frame.
    setattr(dynamic_rendezvous, "get_method_name", method_name)  # noqa: B010


def private_log_folders() -> None:
    """torchrun makes its per-attempt folders (``--log-dir``, the ranks' error files with
    their tracebacks) owner-only, whatever the umask (idempotent)."""
    from torch.distributed.elastic.multiprocessing import api

    specs: Any = api.DefaultLogsSpecs
    if getattr(specs.reify, "_distrain_private", False):
        return
    reify = specs.reify

    def private_reify(self: Any, envs: dict[int, dict[str, str]]) -> Any:
        old = os.umask(0o077)  # the agent's threads make no files meanwhile
        try:
            return reify(self, envs)
        finally:
            os.umask(old)

    private_reify._distrain_private = True  # type: ignore[attr-defined]
    specs.reify = private_reify


def worker_rounds() -> None:
    """Give every worker the c10d rendezvous round it runs in, as ``DISTRAIN_ROUND``
    (idempotent; nothing under a rendezvous without rounds, such as ``static``).

    ``TORCHELASTIC_RESTART_COUNT`` can differ between the nodes of one round: an agent
    whose workers still look healthy when another node comes back to the rendezvous
    starts them again as a membership change, which torch does not count. The round is
    the rendezvous's own number, read by every node from the state they share.
    """
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    handler: Any = dynamic_rendezvous.DynamicRendezvousHandler
    if getattr(handler.next_rendezvous, "_distrain_round", False):
        return
    join = handler.next_rendezvous
    joined: list[int] = []  # the round this agent last joined

    def next_rendezvous(self: Any) -> Any:
        info = join(self)
        state = getattr(getattr(self, "_state_holder", None), "state", None)
        number = getattr(state, "round", None)
        if isinstance(number, int):
            joined[:] = [number]
        return info

    specs: Any = api.DefaultLogsSpecs
    reify = specs.reify

    def reify_in_round(self: Any, envs: dict[int, dict[str, str]]) -> Any:
        if joined:
            for env in envs.values():  # the dicts the workers start with
                env[ENV_ROUND] = str(joined[0])
        return reify(self, envs)

    next_rendezvous._distrain_round = True  # type: ignore[attr-defined]
    handler.next_rendezvous = next_rendezvous
    specs.reify = reify_in_round


def main(argv: list[str] | None = None) -> None:
    """Run torchrun's main with loopback-only stores, a signed rendezvous state,
    owner-only log folders and each worker's rendezvous round.

    Watches the owner when told to (``DISTRAIN_OWNER_PID``).
    """
    from . import collector, jobkey

    owner = os.environ.pop(ENV_OWNER, "")
    if owner:
        watch_owner(int(owner))
    with collector.paused():  # torch's import, in an agent that was not forked warm
        bind_stores_to_loopback()
        fast_rendezvous_polls()
        private_log_folders()
        worker_rounds()
        from torch.distributed import run as torchrun
    key = jobkey.load()
    if key is not None:
        sign_rendezvous_state(key)

    torchrun.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
