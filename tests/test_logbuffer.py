"""LogBuffer: bounded per-rank storage, filtering, folding, divergence."""

from __future__ import annotations

import re

import pytest

from jupyter_disttrain.logbuffer import JOB_RANK, FoldedLine, LogBuffer, format_ranks


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([0, 1, 2, 3, 5], "0-3,5"),
        ([5, 3, 2, 1, 0, 3], "0-3,5"),
        ([7], "7"),
        ([0, 1], "0-1"),
        ([0, 2, 4], "0,2,4"),
        ([0, 1, 2, 10, 11, 12, 20], "0-2,10-12,20"),
        ([], ""),
    ],
)
def test_format_ranks(ranks: list[int], text: str) -> None:
    assert format_ranks(ranks) == text


def test_ring_buffer_is_bounded_and_counts_drops() -> None:
    buf = LogBuffer(limit=3)
    for i in range(10):
        buf.append(0, float(i), f"a{i}")
    buf.append(1, 10.0, "b0")
    assert [line.text for line in buf.lines()] == ["a7", "a8", "a9", "b0"]
    assert buf.dropped == 7
    assert buf.dropped_for(0) == 7 and buf.dropped_for(1) == 0
    assert buf.total == 11 and len(buf) == 4
    assert [line.n for line in buf.lines(ranks=[0])] == [7, 8, 9]


def test_long_lines_are_cut() -> None:
    buf = LogBuffer(max_chars=10)
    line = buf.append(0, 0.0, "x" * 100)
    assert line.text == "x" * 10 + " [...]"


def test_lines_filters_in_arrival_order() -> None:
    buf = LogBuffer()
    texts = [(0, "Loading data"), (1, "loading DATA"), (0, "epoch 1"), (2, "Epoch 1"), (1, "oops")]
    for i, (rank, text) in enumerate(texts):
        buf.append(rank, float(i), text)
    assert [(line.rank, line.text) for line in buf.lines()] == texts
    assert [line.seq for line in buf.lines()] == [0, 1, 2, 3, 4]
    assert [line.text for line in buf.lines(search="loading")] == ["Loading data", "loading DATA"]
    assert [line.text for line in buf.lines(search=re.compile(r"^[Ee]poch \d"))] == [
        "epoch 1",
        "Epoch 1",
    ]
    assert [line.text for line in buf.lines(ranks=[1, 7])] == ["loading DATA", "oops"]
    assert [line.text for line in buf.lines(limit=2)] == ["Epoch 1", "oops"]
    assert [line.text for line in buf.lines(search="epoch", limit=1)] == ["Epoch 1"]
    assert [line.text for line in buf.lines(since=2)] == ["Epoch 1", "oops"]
    assert buf.lines(since=4) == []
    assert buf.ranks() == [0, 1, 2]


def test_fold_interleaved_identical_lines() -> None:
    buf = LogBuffer()
    t = 0.0
    for epoch in (3, 4):
        # ranks print in bursts, interleaved, with rank-specific lines between
        for rank in (2, 0, 7, 1, 5, 3, 6, 4):
            buf.append(rank, t, f"Epoch {epoch} done")
            buf.append(rank, t, f"loss {rank / 10 + epoch}")
            t += 1
    entries = buf.folded()
    labels = [e.label() for e in entries]
    assert labels[0] == "[ranks 0-7] Epoch 3 done"
    assert labels[1] == "[rank 2] loss 3.2"
    assert labels.count("[ranks 0-7] Epoch 4 done") == 1
    assert len(entries) == 2 * (1 + 8)
    first = entries[0]
    assert first == FoldedLine(0, 0.0, tuple(range(8)), "Epoch 3 done")
    assert [e.label() for e in buf.folded(limit=2)] == ["[rank 6] loss 4.6", "[rank 4] loss 4.4"]


def test_fold_same_rank_twice_opens_a_new_entry() -> None:
    buf = LogBuffer()
    for rank, text in [(0, "ckpt"), (1, "ckpt"), (0, "ckpt"), (1, "ckpt"), (JOB_RANK, "ckpt")]:
        buf.append(rank, 0.0, text)
    assert [e.label() for e in buf.folded()] == [
        "[ranks 0-1] ckpt",
        "[ranks 0-1] ckpt",
        "[job] ckpt",
    ]


def test_fold_window_limits_how_far_back_lines_join() -> None:
    buf = LogBuffer()
    buf.append(0, 0.0, "ready")
    for i in range(5):
        buf.append(0, 0.0, f"noise {i}")
    buf.append(1, 0.0, "ready")
    assert [e.ranks for e in buf.folded(search="ready")] == [(0, 1)]
    assert buf.folded(window=3)[0].ranks == (0,)
    assert buf.folded(window=3)[-1].label() == "[rank 1] ready"
    assert buf.folded(window=6)[0].ranks == (0, 1)


def test_first_divergence() -> None:
    buf = LogBuffer()
    for rank in range(4):
        buf.append(rank, 0.0, "start")
        buf.append(rank, 1.0, "epoch 1")
    buf.append(JOB_RANK, 1.5, "pod scheduled")  # job-wide lines are ignored
    assert buf.first_divergence() is None
    for rank in range(4):
        buf.append(rank, 2.0, "Traceback (most recent call last):" if rank == 2 else "epoch 2")
    div = buf.first_divergence()
    assert div is not None
    assert div.n == 2
    assert div.texts == {
        0: "epoch 2",
        1: "epoch 2",
        2: "Traceback (most recent call last):",
        3: "epoch 2",
    }
    assert div.seq == 9  # the first of those lines to arrive (rank 0's)
    assert buf.first_divergence(ranks=[0, 1, 3]) is None
    # a rank that printed fewer lines is behind, not divergent
    buf.append(0, 3.0, "epoch 3")
    assert buf.first_divergence(ranks=[0, 1]) is None
    # key= can mask rank-specific parts
    other = LogBuffer()
    other.append(0, 0.0, "rank 0 ready")
    other.append(1, 0.0, "rank 1 ready")
    assert other.first_divergence() is not None
    assert other.first_divergence(key=lambda s: re.sub(r"\d+", "#", s)) is None


def test_first_divergence_aligns_by_line_number_after_drops() -> None:
    buf = LogBuffer(limit=2)
    for i in range(5):
        buf.append(0, float(i), f"line {i}")
    for i in range(3):
        buf.append(1, float(i), f"line {i}")
    # rank 0 keeps lines 3-4, rank 1 keeps lines 1-2: no kept line number in common
    assert buf.first_divergence() is None
    buf.append(1, 3.0, "line 3 (different)")
    div = buf.first_divergence()
    assert div is not None and div.n == 3
    assert div.texts == {0: "line 3", 1: "line 3 (different)"}


def test_memory_stays_bounded_under_heavy_output() -> None:
    buf = LogBuffer(limit=100, max_chars=50)
    for i in range(50_000):
        buf.append(i % 8, float(i), "y" * 200)
    assert len(buf) == 800
    assert buf.dropped == 50_000 - 800
    assert all(len(line.text) == 50 + len(" [...]") for line in buf.lines())


def test_invalid_limits() -> None:
    with pytest.raises(ValueError):
        LogBuffer(limit=0)


def test_a_progress_bar_redrawn_many_times_is_one_line_as_a_terminal_shows_it() -> None:
    """tqdm redraws with ``\\r``; each redraw a protocol line ended arrives as a line of its
    own: a redraw after a redraw takes its place, its number and a new ``seq``."""
    buf = LogBuffer(limit=5)
    buf.append(0, 0.0, "training")
    for i in range(1000):
        buf.append(0, 1.0 + i, f"\r{i / 10:.0f}%|##")
    bar = buf.lines()[-1]
    assert [line.text for line in buf.lines()] == ["training", "100%|##"]
    assert bar.n == 1 and bar.seq == 1000 and bar.t == 1000.0
    assert buf.lines(since=999) == [bar]  # incremental readers get the redraw
    assert buf.dropped == 0
    buf.append(0, 2000.0, "epoch done")  # a line of its own ends the bar
    buf.append(0, 2001.0, "\r0%|")  # a new bar: after a plain line, a line of its own
    buf.append(1, 2002.0, "\r5%|")  # another rank's bar is its own
    assert [line.text for line in buf.lines(ranks=[0])] == [
        "training",
        "100%|##",
        "epoch done",
        "0%|",
    ]
    assert [line.n for line in buf.lines(ranks=[0])] == [0, 1, 2, 3]


def test_a_line_keeps_the_text_after_its_last_carriage_return() -> None:
    buf = LogBuffer()
    buf.append(0, 0.0, "\r 1%\r 2%\r 3%|#")  # redraws that no report line split
    buf.append(0, 1.0, "loss 0.5\r")
    buf.append(0, 2.0, "\r")
    assert [line.text for line in buf.lines()] == [" 3%|#", "loss 0.5", ""]
