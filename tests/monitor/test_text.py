"""The monitor's plain words for a rank's end."""

from __future__ import annotations

from jupyter_disttrain.monitor.text import lost_peer_text
from tests.widgets.streams import monitor_of


def test_only_ranks_that_lost_their_peer_get_the_plain_words() -> None:
    snap = monitor_of("rank1_raises").snapshot()
    words = {r["rank"]: lost_peer_text(r, snap["cause"]) for r in snap["ranks"]}
    assert words == {r: "" if r == 1 else "lost its peer (rank 1 failed)" for r in range(4)}
    assert all(lost_peer_text(r, None) == "" for r in snap["ranks"])  # no cause: no words
