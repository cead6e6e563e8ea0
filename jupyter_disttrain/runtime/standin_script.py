"""What the stand-in ranks of :mod:`.standin` do: a pure script of steps, stragglers and faults."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Final

#: Where a waiting rank's main thread is, and where a hung one is (cell lines).
WAIT_LINE: Final = 9
HANG_LINE: Final = 11
CELL: Final = "<distrain-cell>"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class Script:
    """``nodes`` x ``nproc`` ranks stepping every ``step_seconds`` for ``steps`` steps.

    ``stragglers`` step ``slow`` times slower. ``fail_rank`` raises at ``fail_step``
    (the others wait in their next collective until its node has ended, then end
    with 1). ``hang_node``'s ranks stop at ``hang_step`` and every other rank waits
    at the next one. ``lost_node`` ends with 137 at ``lost_step``; the others go on.
    """

    nodes: int
    nproc: int
    steps: int = 100
    step_seconds: float = 1.0
    stragglers: tuple[int, ...] = ()
    slow: float = 1.8
    fail_rank: int | None = None
    fail_step: int = 500
    hang_node: int | None = None
    hang_step: int = 0
    lost_node: int | None = None
    lost_step: int = 0

    def __post_init__(self) -> None:
        world = self.nodes * self.nproc
        if self.nodes < 1 or self.nproc < 1:
            raise ValueError("standin: --nodes and --nproc must be at least 1")
        for name, rank in [("--fail-rank", self.fail_rank)] + [
            ("--stragglers", r) for r in self.stragglers
        ]:
            if rank is not None and not 0 <= rank < world:
                raise ValueError(f"standin: {name} {rank} is not a rank of {world}")
        for name, node in (("--hang-node", self.hang_node), ("--lost-node", self.lost_node)):
            if node is not None and not 0 < node < self.nodes:
                raise ValueError(f"standin: {name} {node} must be a node of 1..{self.nodes - 1}")

    # --- the clock -------------------------------------------------------------------
    def period(self, rank: int) -> float:
        """Seconds one step takes ``rank``."""
        return self.step_seconds * (self.slow if rank in self.stragglers else 1.0)

    def due_step(self, rank: int, elapsed: float) -> int:
        """The last step ``rank`` has finished ``elapsed`` seconds in (-1: none yet).

        Ranks start spread over one step so that a node's lines do not all come at once.
        """
        offset = (rank % 97) / 97 * self.step_seconds
        return math.floor((elapsed - offset) / self.period(rank))

    def node_of(self, rank: int) -> int:
        return rank // self.nproc

    def verdict(self, rank: int, step: int) -> str:
        """What ``rank`` does at ``step``: ``step``, ``raise``, ``hang``, ``wait`` or ``lost``."""
        node = self.node_of(rank)
        if self.fail_rank is not None and step >= self.fail_step:
            if rank == self.fail_rank:
                return "raise"
            if step > self.fail_step:
                return "wait"
        if self.hang_node is not None:
            if node == self.hang_node and step >= self.hang_step:
                return "hang"
            if step > self.hang_step:
                return "wait"
        if self.lost_node is not None and node == self.lost_node and step >= self.lost_step:
            return "lost"
        return "step"

    # --- what a rank says ------------------------------------------------------------
    def values(self, rank: int, step: int) -> dict[str, float]:
        """A rank's metrics at ``step``: a falling loss (a little different per rank) and
        ``step_time``, the seconds of its own work the step took (what a rank reports for
        the monitor to name stragglers)."""
        loss = 2.0 / math.sqrt(step + 1) + (rank % 13) * 0.001
        return {"loss": round(loss, 6), "step_time": round(self.period(rank), 4)}

    def error_fields(self, rank: int, step: int) -> dict[str, Any]:
        message = f"loss became nan at step {step}"
        return {
            "type": "FloatingPointError",
            "module": "builtins",
            "message": message,
            "traceback": (
                "Traceback (most recent call last):\n"
                f'  File "{CELL}", line {WAIT_LINE - 1}, in <module>\n'
                f"FloatingPointError: {message}\n"
            ),
        }

    # --- arguments -------------------------------------------------------------------
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--nodes", type=int, required=True)
        parser.add_argument("--nproc", type=int, default=8)
        parser.add_argument("--steps", type=int, default=100)
        parser.add_argument("--step-seconds", type=float, default=1.0)
        parser.add_argument("--stragglers", type=_ints, default=())
        parser.add_argument("--slow", type=float, default=1.8)
        parser.add_argument("--fail-rank", type=int, default=None)
        parser.add_argument("--fail-step", type=int, default=500)
        parser.add_argument("--hang-node", type=int, default=None)
        parser.add_argument("--hang-step", type=int, default=0)
        parser.add_argument("--lost-node", type=int, default=None)
        parser.add_argument("--lost-step", type=int, default=0)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Script:
        return cls(**{name: getattr(args, name) for name in cls.__dataclass_fields__})


def stacks_for(script: Script, rank: int) -> dict[str, Any]:
    """The ``stacks`` line fields (but ``request``/``reason``) of a stand-in ``rank``: in
    ``all_reduce`` at cell line :data:`WAIT_LINE`, or asleep at :data:`HANG_LINE` when it is
    a rank of the hung node."""
    hung = script.hang_node is not None and script.node_of(rank) == script.hang_node
    if hung:
        frames = [[CELL, HANG_LINE, "<module>"], ["/usr/lib/python3.11/time.py", 0, "sleep"]]
        call, line = "time.sleep", HANG_LINE
    else:
        frames = [
            [CELL, WAIT_LINE, "<module>"],
            ["/torch/distributed/distributed_c10d.py", 2800, "all_reduce"],
        ]
        call, line = "all_reduce", WAIT_LINE
    thread = {"name": "MainThread", "main": True, "frames": frames, "call": call, "cell_line": line}
    return {"threads": [thread], "collective": None, "pid": 1000 + rank}
