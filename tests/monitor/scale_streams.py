"""A large job's worker lines, signed with the test key and read through the real parser.

``LargeJob`` writes what ranks of a ``nodes`` x ``nproc`` job print (hello,
metric, error, stacks), signs each line with :data:`tests.signing.KEY` and
feeds it to a real :class:`JobMonitor` through :func:`events.parse_line`, from
the rank's own stream. Times are placed just before the wall clock, so the
monitor reads the ranks as current.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.runtime.protocol import encode
from tests.signing import KEY, trust

#: Seconds between two steps of a rank that is not slow (long: a loaded machine stays current).
STEP_S = 10.0
#: Seconds of reports fed before "now".
SPAN_S = 200.0


class LargeJob:
    """A monitor of ``nodes`` x ``nproc`` ranks and the signed lines that feed it."""

    def __init__(self, nodes: int = 128, nproc: int = 8) -> None:
        self.nodes, self.nproc = nodes, nproc
        self.world = nodes * nproc
        self.trust = trust(nodes, nproc)
        self.monitor = JobMonitor("big", "local", self.world, nodes=nodes, nproc=nproc)
        self.t0 = time.time() - SPAN_S
        self.rejected: list[str] = []

    def feed(self, kind: str, rank: int, t: float, **fields: object) -> None:
        """One line of ``rank`` (from its own stream), signed, parsed and fed."""
        line = encode(kind, rank, sign_with=KEY, t=round(t, 6), **fields)
        event = ev.parse_line(line, rank, trust=self.trust)
        if event.kind == "log":
            self.rejected.append(str(event.get("rejected")))
        self.monitor.feed(event)

    def start(self) -> None:
        """Every rank says hello."""
        for rank in range(self.world):
            self.feed(
                "hello",
                rank,
                self.t0,
                local_rank=rank % self.nproc,
                world_size=self.world,
                node_rank=rank // self.nproc,
                host=f"node{rank // self.nproc}",
                pid=1000 + rank,
                backend="gloo",
            )

    def train(
        self,
        slow: Mapping[int, float] = {},
        loss_scale: Mapping[int, float] = {},
        stop_at: Mapping[int, int] = {},
    ) -> None:
        """Each rank reports ``loss`` every :data:`STEP_S` s (x ``slow[rank]`` for slow
        ranks) up to now; ``loss_scale`` multiplies a rank's loss; ``stop_at`` the step
        after which a rank reports nothing more."""
        end = self.t0 + SPAN_S
        for rank in range(self.world):
            every = STEP_S * slow.get(rank, 1.0)
            step = 0
            while self.t0 + 1 + step * every <= end and step <= stop_at.get(rank, 10**9):
                loss = (1.0 / (step + 1) + 0.001 * (rank % 7)) * loss_scale.get(rank, 1.0)
                self.feed(
                    "metric", rank, self.t0 + 1 + step * every, step=step, values={"loss": loss}
                )
                step += 1

    def hang(self, odd: Iterable[int], t: float) -> None:
        """Every rank sends its stacks at ``t``: ``odd`` in time.sleep, the rest in all_reduce."""
        stuck = set(odd)
        for rank in range(self.world):
            call = "time.sleep" if rank in stuck else "all_reduce"
            frames = [
                ["<distrain-cell>", 11 if rank in stuck else 9, "<module>"],
                ["x.py", 1, call],
            ]
            self.feed(
                "stacks",
                rank,
                t,
                request="h1",
                reason="hang",
                quiet=30.0,
                threads=[
                    {
                        "name": "MainThread",
                        "main": True,
                        "frames": frames,
                        "call": call,
                        "cell_line": frames[0][1],
                    }
                ],
                collective={"seq": 40 if rank in stuck else 41, "op": "all_reduce"},
            )
