"""What the library integrations share: ranks, the stop decision, per-step lines, numbers."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import preemption


def rank() -> int:
    """This process's global rank (0 outside a distributed job)."""
    return int(os.environ.get("RANK", "0"))


def _group() -> Any:
    """``torch.distributed`` when a process group of more than one rank is up, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


#: About how often (seconds) the ranks vote on a stop request during training.
VOTE_SECONDS = 1.0


class StopVote:
    """Whether the job was asked to stop (SIGTERM), the same answer on every rank.

    Only where SIGTERM is a preemption request (:func:`.preemption.install`).
    With a process group the ranks vote with one all-reduce at a step every
    rank reaches (a library's step end), not at every step: rank 0 measures
    its steps and names, in the same all-reduce, the step of the next vote,
    about :data:`VOTE_SECONDS` later. A stop is so decided within about a
    second of training (or one step, when steps are slower), at one step for
    all ranks.
    """

    def __init__(self) -> None:
        self.next_at = 0
        self.last: tuple[int, float] | None = None

    def __call__(self, step: int) -> bool:
        """Whether every rank stops at ``step`` (call it at every step end, on every rank)."""
        if not preemption.installed():
            return False
        if step < self.next_at:  # only ever ahead with a process group
            return False
        dist = _group()
        if dist is None:
            return preemption.pending()
        import torch

        mine = preemption.pending()
        vote = torch.tensor([1 if mine else 0, self._interval(step)], dtype=torch.int64)
        dist.all_reduce(vote, op=dist.ReduceOp.MAX)
        stop, interval = int(vote[0].item()), int(vote[1].item())
        self.next_at = step + max(1, interval)
        if stop and not mine:
            preemption.agreed()
        return bool(stop)

    def _interval(self, step: int) -> int:
        """Rank 0: steps until the next vote, from the pace since the last one; others 0."""
        now = time.monotonic()
        last, self.last = self.last, (step, now)
        if rank() != 0 or last is None or step <= last[0]:
            return 1 if rank() == 0 else 0
        per_step = max(1e-6, (now - last[1]) / (step - last[0]))
        return int(min(1000, max(1, VOTE_SECONDS / per_step)))


#: Seconds after which a rank sends its latest step values off the library's logging steps.
LATEST_EVERY = 1.0


class StepLines:
    """One rank's per-step values as metric lines, at a bounded rate, none that matters lost.

    A loop that logs at every step (Lightning's ``self.log``) would otherwise
    send a signed line per step from every rank, each one written, read and
    verified. :meth:`offer` (at every step end) sends the values at once when
    ``due`` (a step the library's own loggers get, such as Lightning's
    ``log_every_n_steps``), on the first offer, and when :data:`LATEST_EVERY`
    seconds passed since this rank's previous line; otherwise it holds them, the
    latest replacing the one held. :meth:`flush` sends what is held: call it at
    an epoch's end, the run's end, before a stop, so an epoch's last values and
    the run's latest are always sent, exact. At most ``1 / every`` lines a
    second come beside the due ones.
    """

    def __init__(
        self,
        send: Callable[[int, dict[str, float]], None],
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.send = send
        self.every = LATEST_EVERY if every is None else every
        self.clock = clock
        self.sent_at = -math.inf
        self.sent_step: int | None = None
        self.held: tuple[int, dict[str, float]] | None = None

    def offer(self, step: int, values: dict[str, float], due: bool = False) -> None:
        """This step's values: sent now or held (see the class)."""
        now = self.clock()
        if (due and step != self.sent_step) or now - self.sent_at >= self.every:
            self._send(step, values, now)
        else:
            self.held = (step, values)

    def flush(self) -> None:
        """Send the values held back, if any."""
        if self.held is not None:
            self._send(*self.held, self.clock())

    def _send(self, step: int, values: dict[str, float], now: float) -> None:
        self.held, self.sent_at, self.sent_step = None, now, step
        self.send(step, values)


def saved_last(step: int) -> None:
    """After every rank saved its part of a stop's checkpoint: the ranks but 0 exit once
    rank 0 committed it (rank 0 exits in its commit, see :func:`.preemption.checkpoint_saved`)."""
    if rank() != 0:
        preemption.follow_writer()


def barrier() -> None:
    """Wait for every rank (nothing without a process group)."""
    dist = _group()
    if dist is not None:
        dist.barrier()


def numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers among ``values`` (one-element tensors too), by name; the rest left out."""
    out: dict[str, float] = {}
    for name, value in values.items():
        if isinstance(value, (bool, str)):
            continue
        try:
            item = getattr(value, "item", None)
            out[str(name)] = float(item() if callable(item) else value)
        except (TypeError, ValueError, RuntimeError):
            continue
    return out
