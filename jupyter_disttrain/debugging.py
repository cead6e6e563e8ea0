"""The notebook's side of a rank's debugger: list paused ranks, send them pdb commands.

A rank stopped at ``breakpoint()`` (or after raising, with ``--post-mortem``)
says so with a signed ``paused`` line (:mod:`.runtime.debugger`); the job's
monitor lists it (:meth:`~.monitor.JobMonitor.paused`). :class:`RankDebugger`
connects to that rank's port through the job's backend
(:meth:`~.backends.base.Backend.connect_rank`: directly on this machine, a
port-forward to the rank's pod on Kubernetes), says hello with the job key
and exchanges signed frames. :func:`cast` sends one command to every paused
rank at once and returns one answer per rank.
"""

from __future__ import annotations

import secrets
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .backends import optional
from .backends.base import BackendError
from .monitor.paused import PausedRank
from .runtime import debugwire as wire

if TYPE_CHECKING:
    from .backends.base import Backend, Plan
    from .monitor import JobMonitor
    from .spec import JobSpec


class DebuggedJob(Protocol):
    """What a rank's debugger reads of its job (a :class:`~jupyter_disttrain.job.Job`)."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def plan(self) -> Plan | None: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def monitor(self) -> JobMonitor: ...
    def status(self) -> str: ...


#: Seconds a command may take to reach the next stop before its answer says "running".
COMMAND_WAIT = 30.0
#: Seconds to connect (a port-forward on Kubernetes takes longer than a local socket).
CONNECT_TIMEOUT = 60.0
#: Largest answer frame read from a rank.
ANSWER_LIMIT = 4 << 20


class DebugError(BackendError):
    """A rank's debugger cannot be reached or used (the message says why and what to do)."""


@dataclass
class Answer:
    """What a rank answered: pdb's ``output``, and where it is now (``paused`` False: it runs)."""

    rank: int
    output: str
    paused: bool
    file: str = ""
    line: int = 0
    function: str = ""
    source: list[tuple[int, str]] = field(default_factory=list)
    exception: str = ""
    error: str = ""

    def __str__(self) -> str:
        return self.output


def _answer(rank: int, message: dict[str, Any]) -> Answer:
    source = [(int(n), str(t)) for n, t in message.get("source") or [] if isinstance(n, int)]
    return Answer(
        rank,
        str(message.get("output") or ""),
        bool(message.get("paused")),
        str(message.get("file") or ""),
        int(message.get("line") or 0),
        str(message.get("function") or ""),
        source,
        str(message.get("exception") or ""),
        str(message.get("error") or ""),
    )


def _stored_key(job: DebuggedJob) -> bytes | None:
    """Where ``job``'s backend keeps its key, when it reaches ranks and knows it."""
    if not optional.RANKS.has(job.backend):
        return None
    return optional.RANKS.of(job.backend).stored_key(job.name)


def job_key(job: DebuggedJob) -> bytes:
    """The key of ``job`` (from its payload, or where its backend keeps it)."""
    key = job.plan.payload.key if job.plan is not None else _stored_key(job)
    if key is None:
        raise DebugError(
            f"job {job.name}'s key is not readable here, so its ranks' debuggers cannot be "
            "reached; debug it from the notebook that started it"
        )
    return key


class RankDebugger:
    """pdb on one paused rank of a job: :meth:`send` a command, :meth:`cont` to let it run.

    Connects on first use and keeps the connection; reconnects when the rank
    stopped again on another port (it keeps one port for its life).
    """

    def __init__(self, job: DebuggedJob, rank: int) -> None:
        if not 0 <= rank < job.spec.world_size:
            raise DebugError(
                f"job {job.name} has ranks 0 to {job.spec.world_size - 1}; rank {rank} is not one"
            )
        self.job = job
        self.rank = rank
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._link: wire.Link | None = None
        self._port = 0

    def where(self) -> PausedRank:
        """Where the rank is paused; :class:`DebugError` when it is not paused."""
        for paused in self.job.monitor.paused():
            if paused.rank == self.rank:
                return paused
        running = ", ".join(str(p.rank) for p in self.job.monitor.paused()) or "none"
        raise DebugError(
            f"rank {self.rank} of job {self.job.name} is not paused (paused ranks: {running}); "
            "put breakpoint() in the cell, or run it with --post-mortem"
        )

    def _connect(self) -> wire.Link:
        paused = self.where()
        if self._link is not None and self._port == paused.port:
            return self._link
        self.close()
        key = job_key(self.job)
        backend = self.job.backend
        if not optional.RANKS.has(backend):
            raise DebugError(str(optional.MissingFeature(backend.name, optional.RANKS)))
        record = backend.job_record(self.job.spec, self.job.status())
        sock = optional.RANKS.of(backend).connect_rank(
            record, paused.node, paused.port, CONNECT_TIMEOUT
        )
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            hello = wire.recv(sock, key, wire.HELLO_LIMIT)
            if hello.get("op") != "hello" or hello.get("rank") != self.rank:
                raise DebugError(
                    f"port {paused.port} of job {self.job.name} is not rank {self.rank}'s debugger"
                )
            nonce = str(hello.get("nonce"))
            wire.send(sock, key, {"op": "hello", "nonce": nonce, "client": secrets.token_hex(8)})
            sock.settimeout(None)
        except (ConnectionError, OSError) as exc:
            sock.close()
            raise DebugError(
                f"rank {self.rank}'s debugger refused the connection: {exc}; it may have resumed"
            ) from None
        self._sock, self._port = sock, paused.port
        self._link = wire.Link(sock, key, nonce, "notebook")
        return self._link

    def _request(self, message: dict[str, Any], timeout: float) -> Answer:
        return _answer(self.rank, self._exchange(message, timeout))

    def _exchange(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            link = self._connect()
            assert self._sock is not None
            try:
                self._sock.settimeout(timeout + 30.0)
                link.send(message)
                return link.recv(ANSWER_LIMIT)
            except (ConnectionError, OSError) as exc:
                self.close()
                raise DebugError(f"lost rank {self.rank}'s debugger: {exc}") from None

    def inspect(self, op: str, **fields: Any) -> dict[str, Any]:
        """The paused rank's frames as data: ``stack`` (``frames``, innermost first), ``vars``
        (``frame``, ``scope``: ``variables``) or ``eval`` (``frame``, ``expr``: ``result`` or
        ``error``) or ``breaks`` (``file``, ``spots``: that file's breakpoints from now on);
        :class:`DebugError` when the rank runs or is unreachable."""
        if op not in ("stack", "vars", "eval", "breaks"):
            raise DebugError(f"{op!r} is not a frame request; use stack, vars, eval or breaks")
        answer = self._exchange({"op": op, **fields}, COMMAND_WAIT)
        if answer.get("error") and not answer.get("paused"):
            raise DebugError(f"rank {self.rank}: {answer['error']}")
        return answer

    def state(self) -> Answer:
        """Where the rank is now, with the source lines around it (no command run)."""
        return self._request({"op": "state"}, COMMAND_WAIT)

    def ask(self, line: str, timeout: float = COMMAND_WAIT) -> Answer:
        """Run one pdb command (``p x``, ``n``, ``w``...); the whole :class:`Answer`."""
        if not isinstance(line, str) or "\n" in line:
            raise DebugError(f"a debugger command is one line of text, got {line!r}")
        answer = self._request({"op": "cmd", "line": line, "wait": timeout}, timeout)
        if answer.error:
            raise DebugError(f"rank {self.rank}: {answer.error}")
        return answer

    def send(self, line: str, timeout: float = COMMAND_WAIT) -> str:
        """Run one pdb command and return what pdb printed."""
        return self.ask(line, timeout).output

    def cont(self) -> str:
        """Let the rank run on (pdb's ``c``); what pdb printed."""
        answer = self.ask("c")
        self.close()
        return answer.output

    def close(self) -> None:
        """Close the connection (the rank stays as it is)."""
        if self._sock is not None:
            self._sock.close()
        self._sock, self._link, self._port = None, None, 0

    def __repr__(self) -> str:
        return f"<RankDebugger job {self.job.name} rank {self.rank}>"


def cast(
    debuggers: dict[int, RankDebugger], line: str, timeout: float = COMMAND_WAIT
) -> dict[int, Answer]:
    """Send ``line`` to every rank of ``debuggers`` at once; one answer per rank."""
    if not debuggers:
        raise DebugError("no rank is paused: nothing to send the command to")

    def one(debugger: RankDebugger) -> Answer:
        try:
            return debugger.ask(line, timeout)
        except DebugError as exc:  # one rank's trouble is its own answer
            return Answer(debugger.rank, "", False, error=str(exc))

    with ThreadPoolExecutor(max_workers=min(16, len(debuggers))) as pool:
        futures = {r: pool.submit(one, d) for r, d in sorted(debuggers.items())}
        return {r: f.result() for r, f in futures.items()}
