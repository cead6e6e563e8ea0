"""What the integrations share: the bounded per-step lines and the numbers read from logs."""

from __future__ import annotations

from jupyter_disttrain.runtime.integrations import common


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(every: float = 1.0) -> tuple[common.StepLines, list[tuple[int, float]], Clock]:
    sent: list[tuple[int, float]] = []
    clock = Clock()
    out = common.StepLines(lambda step, values: sent.append((step, values["loss"])), every, clock)
    return out, sent, clock


def test_fast_steps_send_the_due_ones_and_the_latest_once_a_second() -> None:
    """100 steps in 1 s, due every 50th: the first, the due ones, then the latest a second on."""
    out, sent, clock = lines()
    for step in range(1, 101):
        out.offer(step, {"loss": step / 10}, due=step % 50 == 0)
        clock.now += 0.01
    assert sent == [(1, 0.1), (50, 5.0), (100, 10.0)]
    for step in range(101, 131):  # 0.3 s on: held, the latest replacing the one before
        out.offer(step, {"loss": step / 10})
        clock.now += 0.01
    assert sent[-1] == (100, 10.0) and out.held == (130, {"loss": 13.0})
    clock.now = 102.0  # over a second after step 100's line (sent at about 100.99)
    out.offer(131, {"loss": 13.1})
    assert sent[-1] == (131, 13.1) and out.held is None


def test_an_epoch_end_flush_sends_the_exact_latest_values_once() -> None:
    out, sent, clock = lines()
    out.offer(1, {"loss": 1.0})
    for step in (2, 3, 4):
        clock.now += 0.1
        out.offer(step, {"loss": float(step)})
    out.flush()
    out.flush()  # nothing held any more: nothing sent twice
    assert sent == [(1, 1.0), (4, 4.0)]


def test_slow_steps_are_all_sent() -> None:
    """Steps further apart than ``every``: every step goes out, whatever is due."""
    out, sent, clock = lines(every=0.5)
    for step in range(1, 6):
        out.offer(step, {"loss": float(step)})
        clock.now += 0.6
    assert [s for s, _ in sent] == [1, 2, 3, 4, 5]


def test_a_due_step_seen_again_is_not_sent_again() -> None:
    """Gradient accumulation: several batches end at one global step; it goes out once."""
    out, sent, clock = lines()
    out.offer(0, {"loss": 0.0})
    for loss in (1.0, 2.0, 3.0):
        clock.now += 0.01
        out.offer(4, {"loss": loss}, due=True)
    out.flush()
    assert sent == [(0, 0.0), (4, 1.0), (4, 3.0)]


def test_every_zero_sends_each_step() -> None:
    out, sent, _clock = lines(every=0.0)
    for step in range(5):
        out.offer(step, {"loss": float(step)})
    assert len(sent) == 5


def test_numbers_keep_numbers_and_one_element_values_only() -> None:
    class Item:
        def item(self) -> float:
            return 2.5

    values = {"a": 1, "b": Item(), "c": "text", "d": True, "e": [1, 2]}
    assert common.numbers(values) == {"a": 1.0, "b": 2.5}
