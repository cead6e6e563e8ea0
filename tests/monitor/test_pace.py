"""Pace alone: a rank's rate over its window, the frontier, the overall rate, stalls."""

from __future__ import annotations

import pytest

from jupyter_disttrain.monitor.pace import MIN_RATE_SPAN_S, STALL_MIN_S, Pace


def test_a_ranks_rate_is_over_its_window_and_starts_again_when_steps_go_back() -> None:
    pace = Pace(rate_window=10.0)
    assert pace.track(0, 0, 100.0) is None  # one point: no rate
    assert pace.track(0, 10, 102.0) == pytest.approx(5.0)
    assert pace.track(0, 20, 104.0) == pytest.approx(5.0)
    # 20 s later the old points fall out of the window: the rate is the recent one
    assert pace.track(0, 22, 124.0) == pytest.approx(2 / 20)
    assert pace.track(0, 5, 125.0) is None  # the rank went back (a restart): afresh


def test_the_frontier_and_the_overall_rate_span_every_rank_and_restart() -> None:
    pace = Pace()
    assert pace.frontier is None and pace.overall() is None
    pace.track(0, 0, 10.0)
    pace.track(1, 40, 20.0)
    pace.restart()  # rates start afresh; the first point and the frontier stay
    pace.track(0, 30, 30.0)
    assert pace.frontier == 40
    assert pace.overall() == pytest.approx(40 / 10)


def test_a_rank_stalls_after_three_of_its_intervals_and_a_forgotten_rank_never_does() -> None:
    pace = Pace()
    for i in range(5):
        pace.track(0, i, 100.0 + 2 * i)  # a step every 2 s, the last at 108
        pace.track(1, i, 100.0 + 2 * i)
    assert not pace.stalled(0, 108.0 + 6.0)
    assert pace.stalled(0, 108.0 + 6.1)
    assert not pace.stalled(2, 1e9)  # never reported
    pace.forget(1)
    assert not pace.stalled(1, 1e9)
    assert pace.all_stalled(200.0)  # rank 0, the only one with a rate
    assert not Pace().all_stalled(200.0)  # nothing rated: nothing stalled


def test_a_fast_rank_stalls_only_after_the_minimum() -> None:
    pace = Pace()
    pace.track(0, 0, 100.0)
    pace.track(0, 1, 100.1)
    assert not pace.stalled(0, 100.1 + STALL_MIN_S)
    assert pace.stalled(0, 100.1 + STALL_MIN_S + 0.01)


def test_steps_a_few_milliseconds_apart_give_no_rate() -> None:
    """A 3-step job that ran in 0.2 ms has no meaningful steps/s; half a second of steps has."""
    pace = Pace()
    assert pace.track(0, 0, 100.0) is None
    assert pace.track(0, 2, 100.0002) is None  # was 10,000 steps/s
    assert pace.overall() is None
    assert pace.track(0, 3, 100.0 + MIN_RATE_SPAN_S) == pytest.approx(3 / MIN_RATE_SPAN_S)
    assert pace.overall() == pytest.approx(3 / MIN_RATE_SPAN_S)


def test_the_stalled_ranks_are_those_each_reads_as_stalled() -> None:
    pace = Pace()
    for rank, (interval, last) in enumerate([(1.0, 10.0), (1.0, 2.0), (5.0, 0.0), (0.1, 9.0)]):
        for k in range(3):
            pace.track(rank, k, last - (2 - k) * interval)
    pace.track(4, 0, 0.0)  # one point: no interval, never stalled
    now = 10.5 + STALL_MIN_S
    each = {rank for rank in range(5) if pace.stalled(rank, now)}
    assert pace.stalled_ranks(now) == each == {1, 3}
