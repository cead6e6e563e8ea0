"""A session cell that raised: its job failed, but every rank lives on (Raised or Ready).

Pure. A session's cell job ends ``Failed`` when the cell raised on some rank;
the ranks whose cell raised read ``Raised`` (their cell's end line said so),
the others ``Ready``. Views then show :data:`~..events.RAISED` instead of
Failed, and say the session is ready for the next cell. A rank that died or
was never heard from again (Failed, Stopped, Running) keeps the job Failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..events import RAISED
from ..logbuffer import format_ranks
from .records import RankState

#: The rank states of a session's live ranks once their cell ended.
_LIVE: Final = frozenset({RAISED, "Ready"})


def cell_raised(state: str, rows: Mapping[int, RankState]) -> bool:
    """True when ``state`` is Failed only because the cell raised: every rank lives on."""
    states = [row.state for row in rows.values()]
    return state == "Failed" and RAISED in states and all(s in _LIVE for s in states)


def shown_end(state: str, rows: Mapping[int, RankState]) -> str:
    """``state``, or :data:`~..events.RAISED` for a session cell that raised."""
    return RAISED if cell_raised(state, rows) else state


def raised_sentence(state: str, rows: Mapping[int, RankState]) -> str | None:
    """``the cell raised on all 4 ranks; the session is ready for the next cell`` (None when
    the job did not end that way)."""
    if not cell_raised(state, rows):
        return None
    ranks = sorted(r for r, row in rows.items() if row.state == RAISED)
    if len(ranks) == len(rows) > 1:
        who = f"all {len(rows)} ranks"
    else:
        who = f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks, ', ')}"
    return f"the cell raised on {who}; the session is ready for the next cell"
