"""Where the ranks are: their stacks grouped, and the sentence that names the odd ranks.

Pure: built from the ``stacks`` events of one request. Ranks whose main
threads have the same frames form one group. The ranks that hold the
others up are those that entered fewer collectives than the rest (torch's
flight recorder, where it records), else the ranks outside the one
largest group.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..events import StackFrame, StacksFields
from ..logbuffer import format_ranks
from .scale import named

#: Calls in which a rank waits for its peers.
COLLECTIVES: Final = frozenset(
    {
        "all_reduce",
        "broadcast",
        "barrier",
        "monitored_barrier",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "all_to_all",
        "all_to_all_single",
        "broadcast_object_list",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "wait",
        "synchronize",
        # JAX: its multi-process helpers, and the wait for a compiled computation's collectives
        "sync_global_devices",
        "process_allgather",
        "broadcast_one_to_all",
        "block_until_ready",
        "wait_at_barrier",
    }
)


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose main threads stand in the same frames."""

    ranks: tuple[int, ...]
    call: str
    cell_line: int | None
    frames: tuple[tuple[str, int, str], ...]
    threads: int

    def place(self) -> str:
        """``"wait in all_reduce (cell line 9)"`` for these ranks."""
        verb = "wait in" if self.call in COLLECTIVES else "are in"
        if len(self.ranks) == 1:
            verb = "waits in" if self.call in COLLECTIVES else "is in"
        where = f" (cell line {self.cell_line})" if self.cell_line is not None else ""
        return f"{verb} {self.call or 'an unknown call'}{where}"


@dataclass(frozen=True)
class Where:
    """The stacks of one request: groups, the odd ranks, missing ranks, the sentence."""

    request: str
    reason: str
    quiet: float | None
    groups: tuple[StackGroup, ...]
    odd: tuple[int, ...]
    missing: tuple[int, ...]
    missed_collective: tuple[int, str] | None
    stacks: Mapping[int, StacksFields]
    #: The cell's source (the source lines of its frames), "" when unknown.
    cell_source: str = ""
    #: Each rank's node when the sentence names nodes too (large jobs), else None.
    node_of: Mapping[int, int] | None = None
    #: Every rank at the same collective, called as different operations: its number and
    #: each operation with the ranks that called it (the largest group first), else None.
    mixed_collective: tuple[int, tuple[tuple[str, tuple[int, ...]], ...]] | None = None

    def sentence(self) -> str:
        """One sentence: who is where, the odd ranks first named."""
        if not self.groups:
            return "No rank's stacks arrived."
        parts = [f"{self._who(g.ranks)} {g.place()}" for g in self.groups]
        text = "; ".join(parts)
        if self.odd:
            who = self._who(self.odd)
            text = f"{who} {'holds' if len(self.odd) == 1 else 'hold'} up the others: {text}"
        if self.missed_collective is not None:
            seq, op = self.missed_collective
            what = f" ({op})" if op else ""
            text += f"; {_ranks(self.odd)} never entered collective {seq}{what}"
        if self.mixed_collective is not None:
            seq, calls = self.mixed_collective
            called = ", ".join(f"{op} on {_ranks(ranks)}" for op, ranks in calls)
            text += (
                f"; as their collective {seq} the ranks called different operations ({called}):"
                " every rank must call the same collectives in the same order"
            )
        if self.missing:
            text += f"; no stacks from {_ranks(self.missing)}"
        text = text[0].upper() + text[1:]
        if self.reason == "hang":
            quiet = f" for {self.quiet:g} s" if self.quiet is not None else ""
            return f"Hang: no rank wrote anything{quiet}. {text}."
        return f"{text}."

    def _who(self, ranks: Sequence[int]) -> str:
        """``ranks 8-15``, or ``ranks 8-15 (node 1)`` when nodes are named."""
        return _ranks(ranks) if self.node_of is None else named(ranks, self.node_of)

    def text(self, *, library: bool = False) -> str:
        """The sentence, then each group's stack (innermost call last).

        The frames of the cell and of the user's own modules are shown with
        their source lines; the runtime's and libraries' frames are folded
        into a count unless ``library`` (then every frame is shown).
        """
        cell = self.cell_source.splitlines()
        lines = [self.sentence()]
        for group in self.groups:
            lines.append("")
            lines.append(f"{_ranks(group.ranks)} ({group.threads} thread(s) each at most):")
            folded = 0
            for index, (file, line, func) in enumerate(group.frames):
                if not library and not user_frame(file):
                    folded += 1
                    continue
                lines.append(f'  File "{file}", line {line}, in {func}')
                source = _source_line(file, line, cell)
                if source:
                    lines.append(f"    {source}")
                lines.extend(locals_lines(self.stacks, group.ranks, index))
            if folded:
                lines.append(f"  ({folded} runtime and library frames folded)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: object, cycle: bool) -> None:
        p.text(self.text())  # type: ignore[attr-defined]


def locals_lines(stacks: Mapping[int, StacksFields], ranks: Sequence[int], index: int) -> list[str]:
    """``rank 3: idx=8123, batch=[...]`` per rank for frame ``index`` of the ranks' main
    threads, where the job sent locals (``--where-locals``)."""
    out = []
    for rank in ranks:
        main = _main_thread(stacks[rank]) if rank in stacks else None
        values = ((main or {}).get("locals") or {}).get(str(index))
        if values:
            shown = ", ".join(f"{name}={value}" for name, value in values.items())
            out.append(f"      rank {rank}: {shown}")
    return out


def user_frame(file: str) -> bool:
    """Whether a frame's file is the cell or the user's own code (not the runtime, the
    standard library or an installed package)."""
    if file.startswith("<"):
        return file.startswith(_CELL_FILES)
    path = file.replace("\\", "/")
    return not any(part in path for part in _LIBRARY_PARTS) and not _STDLIB.search(path)


def _source_line(file: str, line: int, cell: list[str]) -> str:
    """The source text of ``file:line`` (the cell's own, or a file this machine has)."""
    if file.startswith(_CELL_FILES):
        return cell[line - 1].strip() if 0 < line <= len(cell) else ""
    if file.startswith("<"):
        return ""
    return linecache.getline(file, line).strip()


_CELL_FILES: Final = ("<distrain-cell", "<cell", "<ipython-input")
_LIBRARY_PARTS: Final = ("/site-packages/", "/dist-packages/", "/jupyter_disttrain/")
_STDLIB: Final = re.compile(r"/lib/python3\.\d+/")


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + format_ranks(list(ranks))


def _main_thread(fields: StacksFields) -> StackFrame | None:
    threads = fields.get("threads") or []
    for thread in threads:
        if thread.get("main"):
            return thread
    return threads[0] if threads else None


def where_from(
    request: str,
    stacks: Mapping[int, StacksFields],
    world_size: int,
    node_of: Mapping[int, int] | None = None,
) -> Where:
    """Group one request's stacks by identical main-thread frames, odd ranks named.

    ``node_of`` (each rank's node): the sentence names the nodes of each group too.
    """
    keyed: dict[tuple[tuple[str, int, str], ...], list[int]] = {}
    info: dict[tuple[tuple[str, int, str], ...], StackFrame] = {}
    for rank in sorted(stacks):
        main = _main_thread(stacks[rank])
        frames = tuple(
            (str(f[0]), int(f[1]), str(f[2])) for f in (main or {}).get("frames", []) if len(f) == 3
        )
        keyed.setdefault(frames, []).append(rank)
        info.setdefault(frames, main or StackFrame())
    groups = [
        StackGroup(
            ranks=tuple(ranks),
            call=str(info[key].get("call") or ""),
            cell_line=info[key].get("cell_line"),
            frames=key,
            threads=max(len(stacks[r].get("threads") or []) for r in ranks),
        )
        for key, ranks in keyed.items()
    ]
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    odd: tuple[int, ...] = ()
    missed: tuple[int, str] | None = None
    seqs = {
        rank: (int(c["seq"]), str(c.get("op", "")))
        for rank, fields in stacks.items()
        if isinstance(c := fields.get("collective"), dict) and isinstance(c.get("seq"), int)
    }
    if len(seqs) == len(stacks) and len(seqs) > 1:
        top = max(seq for seq, _ in seqs.values())
        behind = tuple(sorted(r for r, (seq, _) in seqs.items() if seq < top))
        if behind:
            odd = behind
            first_missed = min(seqs[r][0] for r in behind) + 1
            ahead = next(op for seq, op in seqs.values() if seq == top)
            missed = (first_missed, ahead if top == first_missed else "")
    mixed = _mixed_collective(seqs) if len(seqs) == len(stacks) and not odd else None
    if not odd and len(groups) > 1 and len(groups[0].ranks) > len(groups[1].ranks):
        odd = tuple(sorted(r for g in groups[1:] for r in g.ranks))
    if odd:  # the odd ranks' groups last
        groups.sort(key=lambda g: (g.ranks[0] in odd, -len(g.ranks), g.ranks))
    first = next(iter(stacks.values()), StacksFields())
    quiet = first.get("quiet")
    return Where(
        request=request,
        reason=str(first.get("reason") or "asked"),
        quiet=float(quiet) if isinstance(quiet, int | float) else None,
        groups=tuple(groups),
        odd=odd,
        missing=tuple(r for r in range(world_size) if r not in stacks),
        missed_collective=missed,
        stacks=dict(stacks),
        node_of=node_of,
        mixed_collective=mixed,
    )


def _mixed_collective(
    seqs: Mapping[int, tuple[int, str]],
) -> tuple[int, tuple[tuple[str, tuple[int, ...]], ...]] | None:
    """Every rank at one collective number under different operations: the number and each
    operation's ranks (most ranks first); None when they agree or an operation is unknown."""
    numbers = {seq for seq, _ in seqs.values()}
    if len(numbers) != 1 or any(not op for _, op in seqs.values()):
        return None
    by_op: dict[str, list[int]] = {}
    for rank in sorted(seqs):
        by_op.setdefault(seqs[rank][1], []).append(rank)
    if len(by_op) < 2:
        return None
    calls = sorted(by_op.items(), key=lambda item: (-len(item[1]), item[1]))
    return numbers.pop(), tuple((op, tuple(ranks)) for op, ranks in calls)
