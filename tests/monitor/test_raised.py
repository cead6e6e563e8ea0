"""A session cell that raised, read from its ranks' states (pure)."""

from __future__ import annotations

import pytest

from jupyter_disttrain.events import ENDED_STATES, RAISED, TERMINAL_STATES
from jupyter_disttrain.monitor.raised import cell_raised, raised_sentence, shown_end
from jupyter_disttrain.monitor.records import RANK_STATES, RankState


def rows(*states: str) -> dict[int, RankState]:
    return {r: RankState(r, r // 2, r % 2, state=s) for r, s in enumerate(states)}


def test_raised_is_a_rank_state_and_an_ended_job_state_distinct_from_failed() -> None:
    assert RAISED in RANK_STATES and RAISED in ENDED_STATES
    assert RAISED not in TERMINAL_STATES  # the job itself is Failed; Raised is what is shown


@pytest.mark.parametrize(
    ("states", "said"),
    [
        (("Raised",) * 4, "all 4 ranks"),
        (("Ready", "Raised", "Ready", "Ready"), "rank 1"),
        (("Ready", "Raised", "Raised", "Ready"), "ranks 1-2"),
        (("Raised", "Ready", "Raised", "Ready"), "ranks 0, 2"),
    ],
)
def test_a_cell_that_raised_with_every_rank_alive_reads_raised(
    states: tuple[str, ...], said: str
) -> None:
    ranks = rows(*states)
    assert cell_raised("Failed", ranks) and shown_end("Failed", ranks) == RAISED
    expected = f"the cell raised on {said}; the session is ready for the next cell"
    assert raised_sentence("Failed", ranks) == expected


@pytest.mark.parametrize(
    ("state", "states"),
    [
        ("Failed", ("Raised", "Raised", "Raised", "Stopped")),  # a rank never came back
        ("Failed", ("Raised", "Failed", "Ready", "Ready")),  # a rank died
        ("Failed", ("Ready",) * 4),  # failed for another reason (the connection was lost)
        ("Running", ("Raised",) * 4),  # the session itself: it runs
        ("Succeeded", ("Ready",) * 4),
    ],
)
def test_anything_else_keeps_its_state(state: str, states: tuple[str, ...]) -> None:
    ranks = rows(*states)
    assert not cell_raised(state, ranks)
    assert shown_end(state, ranks) == state and raised_sentence(state, ranks) is None
