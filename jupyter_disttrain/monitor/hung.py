"""The rank rows of a hung job: who holds the others up, and where each rank is (pure)."""

from __future__ import annotations

from .records import RankRow
from .where import COLLECTIVES, StackGroup, Where

__all__ = ["hung_rows"]


def hung_rows(rows: list[RankRow], hang: Where | None) -> list[RankRow]:
    """``rows`` as a hang reads them: unchanged without one (``hang`` None).

    The ranks that hold the others up (``hang.odd``) read ``Hung``; every
    running rank whose stacks arrived says where it stands (``is in time.sleep
    (cell line 11)``, ``waits in all_reduce (cell line 9)``) as its reason.
    """
    if hang is None:
        return rows
    place = {rank: _one(group) for group in hang.groups for rank in group.ranks}
    out: list[RankRow] = []
    for row in rows:
        rank = row["rank"]
        if row["state"] != "Running" or rank not in place:
            out.append(row)
            continue
        marked = row.copy()
        marked["state"] = "Hung" if rank in hang.odd else "Running"
        marked["reason"] = place[rank]
        out.append(marked)
    return out


def _one(group: StackGroup) -> str:
    """Where one rank of ``group`` stands: ``waits in all_reduce (cell line 9)``."""
    verb = "waits in" if group.call in COLLECTIVES else "is in"
    where = f" (cell line {group.cell_line})" if group.cell_line is not None else ""
    return f"{verb} {group.call or 'an unknown call'}{where}"
