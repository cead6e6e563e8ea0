"""The throttled render thread (widgets/render_loop.py)."""

from __future__ import annotations

import itertools
import threading
import time

from jupyter_disttrain.widgets.render_loop import RenderLoop


def test_renders_at_most_max_rate_per_second_while_the_version_churns() -> None:
    version = [0]
    starts: list[float] = []
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            version[0] += 1

    loop = RenderLoop(lambda: starts.append(time.monotonic()), lambda: version[0], lambda: False)
    feeder = threading.Thread(target=churn)
    feeder.start()
    loop.start()
    time.sleep(1.5)
    stop.set()
    feeder.join()
    loop.stop()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) >= 5
    assert min(gaps[:-1]) >= loop.interval * 0.95  # the final render may follow a tick early


def test_idle_loop_renders_on_the_clock_tick_only() -> None:
    renders: list[float] = []
    loop = RenderLoop(lambda: renders.append(time.monotonic()), lambda: 7, lambda: False, tick=0.3)
    loop.start()
    time.sleep(1.0)
    loop.stop()
    assert 3 <= len(renders) <= 6  # first, ~3 ticks, the final one


def test_wake_renders_soon_and_finish_ends_with_a_final_render() -> None:
    renders: list[str] = []
    finished = threading.Event()
    done: list[bool] = []
    loop = RenderLoop(
        lambda: renders.append("r"),
        lambda: 1,
        finished.is_set,
        lambda: done.append(True),
        tick=60,
    )
    loop.start()
    time.sleep(0.3)
    count = len(renders)
    loop.wake()
    time.sleep(0.25)
    assert len(renders) == count + 1
    finished.set()
    deadline = time.monotonic() + 5
    while loop.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not loop.running and done == [True]
    assert len(renders) >= count + 2


def test_stop_renders_at_once_even_right_after_a_render() -> None:
    """A cell that waited for its job returns after ``stop``: the last render does not wait
    for the rate's gap (2 renders a second: a 0.5 s gap after the render just made)."""
    renders: list[float] = []
    loop = RenderLoop(lambda: renders.append(time.monotonic()), lambda: 1, lambda: False)
    loop.max_busy, loop.interval = 1.0, 0.5
    loop.start()
    deadline = time.monotonic() + 5
    while not renders and time.monotonic() < deadline:
        time.sleep(0.01)
    assert renders, "no first render"
    stopped = time.monotonic()
    loop.stop()
    took = time.monotonic() - stopped
    assert not loop.running and len(renders) == 2, renders
    assert renders[1] - renders[0] < 0.4 and took < 0.4, (renders, took)


def test_a_failing_render_is_kept_and_the_loop_goes_on() -> None:
    calls = [0]

    def render() -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise ValueError("boom")

    loop = RenderLoop(render, lambda: calls[0], lambda: False)
    loop.render_now()
    loop.render_now()
    assert loop.errors == ["ValueError: boom"] and loop.renders == 2


def test_no_render_starts_while_the_view_is_behind_but_the_last_one_does() -> None:
    version = [0]
    renders: list[int] = []
    behind = threading.Event()
    loop = RenderLoop(
        lambda: renders.append(version[0]), lambda: version[0], lambda: False, behind=behind.is_set
    )
    loop.start()
    time.sleep(0.3)
    behind.set()
    time.sleep(0.2)  # a render already begun may finish
    held = len(renders)
    for _ in range(10):
        version[0] += 1
        time.sleep(0.05)
    assert len(renders) == held  # the view is behind: nothing more is sent to it
    behind.clear()
    time.sleep(0.3)
    assert renders[-1] == version[0]  # caught up: the latest state, once
    behind.set()
    version[0] += 1
    loop.stop()
    assert renders[-1] == version[0]  # the final render does not wait


def test_a_render_that_waited_without_working_does_not_space_the_next_one() -> None:
    """A kernel busy at a job's start keeps the render thread from the GIL: its render
    takes long on the clock, not in work. Spaced by the clock, the next render came
    0.3 / max_busy = 1.5 s later; spaced by the render's own CPU, at the usual interval."""
    starts: list[float] = []
    version = itertools.count()

    def waits_then_renders() -> None:
        starts.append(time.monotonic())
        time.sleep(0.3)

    loop = RenderLoop(waits_then_renders, lambda: next(version), lambda: False)
    loop.start()
    time.sleep(2.0)
    loop.stop()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) >= 3, starts
    # by the clock: 1.5 s apart; by the CPU: the interval after each 0.3 s wait
    assert max(gaps[:-1]) < 0.3 / loop.max_busy / 1.5, gaps
