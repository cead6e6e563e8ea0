"""Failure sentences that name where ranks run: a node that died, ranks cut off from each other.

Pure functions over the monitor's records (no I/O). Every sentence names a
rank's place as the backend reported it: its node and, on Kubernetes, its
pod (``rank 1 (node 1, pod job-worker-0)``).

* :func:`failed_sentence`: the failed job's cause, a killed rank with its place
  (a dead node is a rank killed on it);
* :func:`partition_sentence`: a rank whose collective timed out while the
  ranks of other nodes went silent for the whole wait (and since): the ranks
  that cannot reach each other, by node and pod;
* :class:`Unresolved`: the rendezvous name the launchers could not resolve.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from ..logbuffer import format_ranks
from .cause import Cause, consequence_text
from .records import RankState
from .scale import node_ranges, summarised

#: A collective that waited out the process group's timeout (gloo; NCCL's watchdog).
_TIMED_OUT: Final = re.compile(
    r"Timed out waiting (\d+)ms for (?:recv|send) operation|"
    r"collective operation timeout: WorkNCCL\(.*?Timeout\(ms\)=(\d+)"
)
#: Of the wait, the share a peer may have spoken in and still count as silent for all of it
#: (its last step's report can come just after the waiting rank entered the collective).
_SPOKE_AT_START: Final = 0.25


def place(row: RankState | None) -> str:
    """``node 1, pod job-worker-0`` (``node 1 on HOST`` without a pod; "" unknown)."""
    if row is None:
        return ""
    if row.pod:
        return f"node {row.node}, pod {row.pod}"
    return f"node {row.node} on {row.host}" if row.host else f"node {row.node}"


def _rank_at(rank: int, rows: Mapping[int, RankState]) -> str:
    where = place(rows.get(rank))
    return f"rank {rank} ({where})" if where else f"rank {rank}"


def failed_sentence(cause: Cause, where: str, rows: Mapping[int, RankState]) -> str:
    """The diagnosis of a failed job whose cause is ``cause`` (``where``: its cell line).

    A killed rank is named with its place (its node went away, or something
    on it killed it): ``rank 1 (node 1, pod job-worker-0) was killed: Error
    (exit code 137)``; any other cause reads ``rank 1 failed (cell line 7): ...``
    (``ranks 1-2``, ``all 4 ranks`` when several failed the same way).
    """
    if cause.category == "killed":  # the cause's line names the signal only: keep the exit said
        after = consequence_text(cause.consequences)
        return f"{_rank_at(cause.rank, rows)} was killed{where}: {cause.reason}{after}"
    who = cause.who()
    if summarised(len(rows)):  # thousands of ranks: say which nodes too
        at = node_ranges({cause.rank, *cause.same}, {r: row.node for r, row in rows.items()})
        who += f" ({at})" if at else ""
    return f"{who} failed{where}: {cause.line().split(': ', 1)[1]}"


def timed_out_seconds(reason: str) -> float | None:
    """The seconds a collective waited when ``reason`` says it timed out, else None."""
    found = _TIMED_OUT.search(reason)
    if found is None:
        return None
    return int(found.group(1) or found.group(2)) / 1000


def silent_peers(cause: Cause, rows: Mapping[int, RankState], waited: float) -> list[int]:
    """The ranks of the other nodes whose every rank said nothing while ``cause`` waited."""
    own = rows.get(cause.rank)
    if own is None:
        return []
    since = cause.t - waited * (1 - _SPOKE_AT_START)
    nodes: dict[int, list[RankState]] = {}
    for _, row in sorted(rows.items()):
        if row.node != own.node:
            nodes.setdefault(row.node, []).append(row)
    return [
        row.rank
        for ranks in nodes.values()
        if all(row.last_heard is None or row.last_heard <= since for row in ranks)
        for row in ranks
    ]


def partition_sentence(
    cause: Cause | None, recovered: Sequence[Cause], rows: Mapping[int, RankState]
) -> str | None:
    """The ranks that cannot reach each other: the first of ``cause`` and the ``recovered``
    causes (newest first) that reads as a partition (see :func:`partition_of`), else None.

    A restart after a partition (pods restarted in place) still reads as one
    while the cut-off node stays silent: the new round waits for it.
    """
    for each in (cause, *reversed(recovered)):
        found = partition_of(each, rows)
        if found is not None:
            return found
    return None


def partition_of(cause: Cause | None, rows: Mapping[int, RankState]) -> str | None:
    """The ranks that cannot reach each other, when ``cause`` is a collective's timeout.

    None unless the cause is a collective that waited out its timeout while
    every rank of some other node said nothing (no step, no line) from the
    start of the wait until now: its peers could not be reached, or answer.
    """
    if cause is None or cause.category != "consequence":
        return None
    waited = timed_out_seconds(cause.reason)
    if waited is None:
        return None
    silent = silent_peers(cause, rows, waited)
    if not silent:
        return None
    own = rows[cause.rank]
    by_node: dict[int, list[int]] = {own.node: [cause.rank]}
    for r in silent:
        by_node.setdefault(rows[r].node, []).append(r)
    sides = " and ".join(_ranks_at(by_node[n], rows) for n in sorted(by_node))
    nodes = ", ".join(f"node {n}" for n in sorted(by_node) if n != own.node)
    step = f" after step {own.step}" if own.step is not None else ""
    return (
        f"{sides} cannot reach each other: rank {cause.rank} waited {waited:g} s in a "
        f"collective{step} and heard nothing from {nodes} all that time; the network between "
        f"their nodes is cut, or {nodes} hangs or stopped"
    )


def _ranks_at(ranks: list[int], rows: Mapping[int, RankState]) -> str:
    if len(ranks) == 1:
        return _rank_at(ranks[0], rows)
    return f"ranks {format_ranks(ranks)} ({place(rows.get(ranks[0]))})"


#: c10d's words for a name it could not resolve (torch's socket.cpp, a warning it retries on).
_UNRESOLVED: Final = re.compile(
    r"addresses of \(([^,()\s]+), (\d+)\) cannot be retrieved \(gai error: -?\d+ - ([^)]+)\)"
)
#: The Kubernetes backend's words for a pod that waits in an init container for a name.
_INIT_WAIT: Final = re.compile(r"pod (\S+) waits for the master address (\S+): its (.+)$")


class Unresolved:
    """The first rendezvous address the ranks could not resolve, read from the logs.

    c10d says so as a warning and retries, and the Training Operator's
    ``init-pytorch`` keeps a Worker waiting for the Master's name (the
    backend says so): :meth:`sentence` reads it only while no rank started
    (once one said hello the name resolved after all).
    """

    def __init__(self) -> None:
        self.found: tuple[str, str, str] | None = None  # (name, address, the words said)

    def feed(self, text: str) -> None:
        """One log line of the job (any source)."""
        if self.found is not None:
            return
        if "cannot be retrieved" in text and (found := _UNRESOLVED.search(text)) is not None:
            name, port, said = found.groups()
            self.found = (name, f"{name}:{port}", said)
        elif "waits for the master address" in text and (found := _INIT_WAIT.search(text)):
            pod, name, said = found.groups()
            self.found = (name, name, f"pod {pod}'s {said}")

    def sentence(self, rows: Mapping[int, RankState]) -> str | None:
        """``the master address NAME does not resolve ...`` while no rank started, else None."""
        if self.found is None or any(row.pid is not None for row in rows.values()):
            return None
        name, address, said = self.found
        return (
            f"the master address {name} does not resolve ({said}): no rank could reach "
            f"{address} to start; its Service is missing or resolves to no pod, or "
            "MASTER_ADDR names the wrong host"
        )
