"""Large jobs read as summaries: ranks by state as ranges, the ranks that differ, slow ranks.

Pure functions over rank rows (no I/O). At thousands of ranks a view lists
no rank it need not: :func:`state_ranges` gives each state's ranks as
ranges (``ranks 0-4095, 4100-8191 Running``), :func:`differing` the ranks
worth a row of their own, and :func:`slow_ranks` / :func:`slow_sentence`
name the ranks whose own step time is far above the median (``ranks 517,
2051 are 1.8x slower per step than the median``). Jobs of at most
:data:`SUMMARY_AT` ranks keep their full tables.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from ..logbuffer import format_ranks
from .records import RankRow, SlowRow, StateRange

__all__ = [
    "MAX_NAMED",
    "SLOW_FACTOR",
    "SUMMARY_AT",
    "differing",
    "node_ranges",
    "parse_ranks",
    "ranges",
    "slow_ranks",
    "slow_sentence",
    "state_ranges",
    "summarised",
    "summary_line",
]

#: Jobs with more ranks than this read as summaries; smaller ones list every rank.
SUMMARY_AT: Final = 16
#: A rank whose step takes this many times the median step time is named as slow.
SLOW_FACTOR: Final = 1.3
#: At most this many ranks are named in a sentence; the rest are counted.
MAX_NAMED: Final = 8
#: At most this many ranks that differ get rows of their own in a summarised table.
MAX_DIFFERING: Final = 64
#: Fewest ranks with a step time before any is compared with the median.
_MIN_RATED: Final = 3
_PART: Final = re.compile(r"^(\d+)(?:\s*-\s*(\d+))?$")


def summarised(world_size: int) -> bool:
    """Whether a job of ``world_size`` ranks is shown as a summary (not one row per rank)."""
    return world_size > SUMMARY_AT


def ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5] -> "0-3, 5"`` (sorted, duplicates dropped)."""
    return format_ranks(ranks, ", ")


def node_ranges(ranks: Iterable[int], node_of: Mapping[int, int]) -> str:
    """``node 1`` or ``nodes 1-2, 7`` for the nodes ``ranks`` run on ("" unknown)."""
    nodes = {node_of[r] for r in ranks if r in node_of}
    if not nodes:
        return ""
    return f"node {next(iter(nodes))}" if len(nodes) == 1 else f"nodes {ranges(nodes)}"


def named(ranks: Sequence[int], node_of: Mapping[int, int] | None = None) -> str:
    """``rank 5 (node 0)``, ``ranks 8-15 (node 1)``; past :data:`MAX_NAMED` ranges, counted."""
    shown = ranges(ranks)
    parts = shown.split(", ")
    if len(parts) > MAX_NAMED:
        shown = f"{', '.join(parts[:MAX_NAMED])} and {len(parts) - MAX_NAMED} more ranges"
    where = node_ranges(ranks, node_of) if node_of is not None else ""
    where = f" ({where})" if where and len(where.split(", ")) <= MAX_NAMED else ""
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {shown}{where}"


def state_ranges(rows: Sequence[RankRow]) -> list[StateRange]:
    """The ranks by state, the largest group first (ties: the state of the lowest rank)."""
    by_state: dict[str, list[int]] = {}
    node_of: dict[int, int] = {}
    for row in rows:
        by_state.setdefault(row["state"], []).append(row["rank"])
        node_of[row["rank"]] = row["node"]
    ordered = sorted(by_state.items(), key=lambda item: (-len(item[1]), item[1][0]))
    return [
        StateRange(
            state=state,
            count=len(ranks),
            ranks=ranges(ranks),
            nodes=ranges({node_of[r] for r in ranks}),
        )
        for state, ranks in ordered
    ]


def summary_line(summary: Sequence[StateRange]) -> str:
    """``8190 Running (ranks 0-4095, 4098-8191); 1 Failed (rank 4096); 1 Hung (rank 4097)``."""
    parts = []
    for group in summary:
        shown = group["ranks"].split(", ")
        if len(shown) > MAX_NAMED:
            rest = len(shown) - MAX_NAMED
            text = f"{', '.join(shown[:MAX_NAMED])} and {rest} more ranges"
        else:
            text = group["ranks"]
        noun = "rank" if group["count"] == 1 else "ranks"
        parts.append(f"{group['count']} {group['state']} ({noun} {text})")
    return "; ".join(parts)


def slow_ranks(
    step_s: Mapping[int, float], node_of: Mapping[int, int], factor: float = SLOW_FACTOR
) -> list[SlowRow]:
    """The ranks whose step time is at least ``factor`` x the median, slowest first.

    ``step_s``: each rank's own seconds per step (only ranks with a current
    figure). Fewer than three ranks are never compared.
    """
    times = {rank: s for rank, s in step_s.items() if s > 0}
    if len(times) < _MIN_RATED:
        return []
    median = statistics.median(times.values())
    if median <= 0:
        return []
    slow = [
        SlowRow(rank=rank, node=node_of.get(rank, 0), step_s=s, factor=s / median)
        for rank, s in times.items()
        if s >= factor * median
    ]
    slow.sort(key=lambda row: (-row["factor"], row["rank"]))
    return slow


def slow_sentence(slow: Sequence[SlowRow], *, nodes: bool = False) -> str:
    """``ranks 517, 2051 are 1.8x slower per step than the median`` ("" for none).

    The factors read as one figure when they round alike, else as a span
    (``1.4-2.1x``); ``nodes`` adds where the ranks run (``(nodes 64, 256)``).
    Past :data:`MAX_NAMED` ranks the slowest are named and the rest counted.
    """
    if not slow:
        return ""
    ranks = sorted(row["rank"] for row in slow[:MAX_NAMED])
    shown = ", ".join(str(r) for r in ranks)
    more = len(slow) - len(ranks)
    if more:
        shown += f" and {more} more"
    noun, verb = ("rank", "is") if len(slow) == 1 else ("ranks", "are")
    where = ""
    if nodes:
        where = f" ({node_ranges(ranks, {row['rank']: row['node'] for row in slow})})"
    low = f"{min(row['factor'] for row in slow):.1f}"
    high = f"{max(row['factor'] for row in slow):.1f}"
    times = low if low == high else f"{low}-{high}"
    return f"{noun} {shown}{where} {verb} {times}x slower per step than the median"


def differing(
    rows: Sequence[RankRow],
    marked: Iterable[int],
    limit: int = MAX_DIFFERING,
) -> list[RankRow]:
    """The rows worth listing one by one: ranks not in the largest state group, and ``marked``.

    ``marked``: ranks named elsewhere (stragglers, slow ranks, the first
    failure). At most ``limit`` rows, the marked ones first, then by rank.
    """
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    common = max(counts, key=lambda state: counts[state]) if counts else ""
    wanted = list(dict.fromkeys(marked))
    first = set(wanted)
    by_rank = {row["rank"]: row for row in rows}
    picked = [by_rank[r] for r in wanted if r in by_rank]
    picked += [row for row in rows if row["state"] != common and row["rank"] not in first]
    return sorted(picked[:limit], key=lambda row: row["rank"])


def parse_ranks(text: str, world_size: int) -> list[int]:
    """``"517, 2048-2055"`` as ranks; ValueError naming the part that is not a rank or range."""
    ranks: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        found = _PART.match(part)
        if found is None:
            raise ValueError(f"{part!r} is not a rank or a range: write ranks as 517, 2048-2055")
        low = int(found.group(1))
        high = int(found.group(2) or low)
        if low > high or high >= world_size:
            raise ValueError(
                f"{part!r} is not within the job's ranks 0-{world_size - 1}: "
                "write ranks as 517, 2048-2055"
            )
        ranks.extend(range(low, high + 1))
    return sorted(set(ranks))
