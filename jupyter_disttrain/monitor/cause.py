"""The root cause of a failed attempt, chosen once from the ranks' failures.

A rank's failure is one of (best first):

* ``raised``: its own code raised an exception (an ``error`` event that is
  not a communication consequence);
* ``exited``: it exited non-zero without an exception, not by a signal the
  launcher sends (or it was killed for memory, ``OOMKilled``);
* ``killed``: it ended by SIGTERM/SIGKILL/SIGINT/SIGHUP, which the launcher
  sends to the ranks that are left when one failed;
* ``consequence``: an exception saying a peer went away or a collective
  could not complete (gloo "Connection closed by peer", NCCL remote errors and
  watchdog timeouts, a store connection refused...).

The cause is the failure of the best class, the earliest (by the rank's own
clock, then the lowest rank) within it, so it does not depend on the order
the failures arrived in. Every other rank of the attempt that did not finish
stopped as a consequence. :func:`choose` is the one place that decision is
made; the monitor exposes it and every view renders it.
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from ..logbuffer import format_ranks
from ..nccl import NcclSummary
from ..results import user_traceback as user_traceback  # re-exported: the views import it here
from .records import ErrorInfo, Failure

#: Failure classes, best cause first.
CLASSES: Final = ("raised", "exited", "killed", "consequence")

#: What an exception says when it only reports that a peer rank went away.
_CONSEQUENCE: Final = re.compile(
    r"connection closed by peer|connection reset by peer|broken pipe|"
    r"gloo/transport|read error \[|ncclRemoteError|remote process exited|"
    r"communicator was aborted|watchdog|NCCL communicator.*abort|"
    r"recvValue|sendBytes|recvBytes|connection refused|failed to recv, got 0 bytes|"
    r"socket timeout.*peer|peer .* (closed|crashed|exited)|DistNetworkError",
    re.IGNORECASE,
)
#: Exception types that only report a peer's end.
_CONSEQUENCE_TYPES: Final = frozenset({"DistNetworkError", "DistBackendError"})
#: Rank states that are not a consequence of a failure (done, or a session rank ready).
_LIVE: Final = frozenset({"Succeeded", "Ready", "Raised"})
#: Exit codes of the signals the launcher sends to the ranks left (negative: the signal).
_LAUNCHER_SIGNALS: Final = frozenset({1, 2, 9, 15})


class Cause(NamedTuple):
    """The root cause of an attempt's failure.

    ``rank`` failed first in the best class (``category`` one of :data:`CLASSES`);
    ``reason`` is that rank's own words (``ValueError: bad batch``, ``exit
    code 3``); ``consequences`` the other ranks of the attempt that stopped
    because of it; ``attempt`` counts restarts. ``same`` are the other ranks
    that failed the same way on their own (same class, same words), of the
    job's ``world`` ranks: the cause is said once for them all.
    """

    rank: int
    category: str
    reason: str
    t: float
    attempt: int
    consequences: tuple[int, ...]
    same: tuple[int, ...] = ()
    world: int = 0

    def line(self) -> str:
        """``rank 1: ValueError: bad batch; 3 ranks stopped as a consequence``."""
        return f"{self.said(clip=False)}{consequence_text(self.consequences)}"

    def who(self) -> str:
        """``rank 1``; ``ranks 0-2`` or ``all 4 ranks`` when others failed the same way."""
        if not self.same:
            return f"rank {self.rank}"
        ranks = sorted({self.rank, *self.same})
        if len(ranks) == self.world:
            return f"all {self.world} ranks"
        return f"ranks {format_ranks(ranks)}"

    def said(self, *, clip: bool = True) -> str:
        """``rank 2 was killed (SIGKILL)`` for a signal, else ``rank 1: ValueError: ...``."""
        if self.category == "killed":
            name = re.search(r"\bSIG[A-Z]+\b", self.reason)
            verb = "were" if self.same else "was"
            return f"{self.who()} {verb} killed" + (f" ({name.group(0)})" if name else "")
        return f"{self.who()}: {_clip(self.reason, 100) if clip else self.reason}"


def consequence_text(ranks: tuple[int, ...]) -> str:
    """``; 3 ranks stopped as a consequence`` ("" for none)."""
    if not ranks:
        return ""
    n = len(ranks)
    return f"; {n} rank{'s' if n != 1 else ''} stopped as a consequence"


def error_reason(error_type: str, message: str) -> str:
    """``ValueError: bad batch``; a ``SystemExit`` that says words (a parser's error line)
    is those words alone; no message: the type alone."""
    if error_type == "SystemExit" and message and not message.lstrip("-").isdigit():
        return message
    return f"{error_type}: {message}" if message else error_type


def classify_error(error_type: str, message: str) -> str:
    """``raised`` or ``consequence`` for an exception of type ``error_type`` saying ``message``."""
    if error_type in _CONSEQUENCE_TYPES or _CONSEQUENCE.search(message):
        return "consequence"
    return "raised"


def classify_exit(code: int | None, reason: str) -> str:
    """``exited`` or ``killed`` for a rank that ended with ``code`` (and the backend's reason)."""
    if "oom" in reason.lower():
        return "exited"  # killed for memory: its own doing
    if code is None:
        return "exited"
    signal = -code if code < 0 else code - 128 if code > 128 else 0
    if signal in _LAUNCHER_SIGNALS or re.search(r"\bSIG(TERM|KILL|INT|HUP)\b", reason):
        return "killed"
    return "exited"


def choose(
    failures: list[Failure],
    attempt: int,
    ended: dict[int, str],
    exits: Sequence[Failure] = (),
    *,
    every: bool = False,
) -> Cause | None:
    """The cause among the ``failures`` of ``attempt``; None when it has none.

    ``ended`` maps every rank to its state now: ranks other than the cause
    that did not succeed are its consequences. ``exits`` are the exits the
    launcher reported (:class:`LauncherExits`). A rank's exception explains
    its own exit, so a rank's exits count only when it reported no exception.
    ``every``: the failures of every attempt up to ``attempt`` compete (a job
    whose restarts did not recover); the best class wins, then the latest
    attempt, so a last attempt that holds only signals and lost peers is
    explained by the rank that raised before it.
    """
    first = 0 if every else attempt
    current = [f for a in range(first, attempt + 1) for f in candidates(failures, a, exits)]
    if not current:
        return None
    best = min(current, key=lambda f: (CLASSES.index(f.category), -f.attempt, f.t, f.rank))
    current = [f for f in current if f.attempt == best.attempt]
    # each rank's best reason: its exception rather than its exit code
    own = {
        f.rank: f
        for f in sorted(current, key=lambda f: (CLASSES.index(f.category), f.t), reverse=True)
    }
    reason = own[best.rank].reason
    same = tuple(
        sorted(
            r
            for r, f in own.items()
            if r != best.rank
            and f.category == best.category
            and f.category != "consequence"
            and f.reason == reason
        )
    )
    others = tuple(
        sorted(
            r
            for r, state in ended.items()
            if r != best.rank and r not in same and state not in _LIVE
        )
    )
    return Cause(best.rank, best.category, reason, best.t, best.attempt, others, same, len(ended))


class LauncherExits:
    """The ranks' exits as torchrun's failure summary reports them, per agent.

    The summary lists ``rank : N (local_rank: L)`` then ``exitcode : C (pid: P)``
    for every failed rank; :meth:`feed` returns a :class:`Failure` for each exit.
    Before a restart torchrun prints no summary, only ``failed (exitcode: C)
    local_rank: L (pid: P)`` for the first worker that failed: ``pids`` (a
    worker's pid to its rank and attempt, from its hello) names that rank. A
    worker the agent itself stopped once another failed (``Sending process P
    closing signal SIGTERM``) ended as a ``consequence``, whatever its signal.
    """

    def __init__(self) -> None:
        self._rank: dict[str, int] = {}
        self._closed: set[int] = set()  # workers an agent sent its closing signal

    def feed(
        self,
        source: str,
        text: str,
        t: float,
        attempt: int,
        pids: Mapping[int, tuple[int, int]] | None = None,
    ) -> Failure | None:
        """One line of agent ``source``; the exit it completes, if any."""
        closing = _CLOSING.search(text)
        if closing is not None:
            self._closed.add(int(closing.group(1)))
            return None
        worker = _WORKER_EXIT.search(text)
        if worker is not None:
            return _worker_exit(worker, t, pids or {}, self._closed)
        found = _SUMMARY_RANK.match(text)
        if found:
            self._rank[source] = int(found.group(1))
            return None
        found = _SUMMARY_EXIT.match(text)
        rank = self._rank.pop(source, None)
        if found is None or rank is None:
            return None
        code = int(found.group(1))
        pid = int(found.group(2)) if found.group(2) else None
        signal = found.group(3) or ""
        why = f"exit code {code}" + (f" ({signal})" if signal else "")
        closed = pid is not None and pid in self._closed
        return Failure(
            t, rank, why, attempt, "consequence" if closed else classify_exit(code, signal)
        )


_SUMMARY_RANK: Final = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")
_SUMMARY_EXIT: Final = re.compile(
    r"^\s*exitcode\s*:\s*(-?\d+)\b[^(]*(?:\(pid:?\s*(\d*)[^)]*\))?\s*(?:\((SIG\w+)\))?"
)


_WORKER_EXIT: Final = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")
#: torchrun's agent stopping its workers (another failed, or it was told to stop).
_CLOSING: Final = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")


def signal_name(code: int) -> str:
    """``SIGKILL`` for exit code -9 or 137; "" when ``code`` is no signal's."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        return signals.Signals(number).name if number else ""
    except ValueError:
        return ""


def _worker_exit(
    found: re.Match[str], t: float, pids: Mapping[int, tuple[int, int]], closed: set[int]
) -> Failure | None:
    """The exit of the worker whose pid a hello named (None for an unknown pid); one its
    agent had stopped (``closed``) is a consequence."""
    code, pid = int(found.group(1)), int(found.group(2))
    owner = pids.get(pid)
    if owner is None:
        return None
    name = signal_name(code)
    why = f"exit code {code}" + (f" ({name})" if name else "")
    category = "consequence" if pid in closed else classify_exit(code, name)
    return Failure(t, owner[0], why, owner[1], category)


def candidates(
    failures: Sequence[Failure], attempt: int, exits: Sequence[Failure] = ()
) -> list[Failure]:
    """The failures of ``attempt`` that count (a rank's exits only without its exception)."""
    current = [f for f in [*failures, *exits] if f.attempt == attempt]
    raised = {f.rank for f in current if f.category in ("raised", "consequence")}
    return [f for f in current if f.category in ("raised", "consequence") or f.rank not in raised]


def recovered_text(causes: list[Cause], loaded: int | None = None) -> str:
    """``recovered from 1 failure (rank 1: RuntimeError: flaky)`` ("" for none).

    ``loaded``: the step of the checkpoint the restarted ranks loaded, said as
    ``; resumed from checkpoint 30``.
    """
    if not causes:
        return ""
    n = len(causes)
    text = f"recovered from {n} failure{'s' if n != 1 else ''} ({causes[0].said()})"
    return text if loaded is None else f"{text}; resumed from checkpoint {loaded}"


def cell_line(errors: Sequence[ErrorInfo], cause: Cause) -> str:
    """`` (cell line 7)``: where in the cell the cause's exception was raised ("" unknown)."""
    for e in errors:
        if e.rank == cause.rank and e.attempt == cause.attempt and e.traceback:
            lines = _CELL_FRAME.findall(e.traceback)
            return f" (cell line {lines[-1]})" if lines else ""
    return ""


_CELL_FRAME: Final = re.compile(r'File "<(?:cell|distrain-cell)[^>]*>", line (\d+)')


def _clip(text: str, limit: int) -> str:
    text = text.splitlines()[0] if text else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def comms_names_cause(comms: NcclSummary) -> bool:
    """Whether the communication reading names a cause (not only the launcher's report)."""
    return not comms.diagnosis.lower().startswith(("a worker process exited", "unrecognised"))
