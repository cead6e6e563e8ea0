"""The backend interface's event delivery: a run of events to a sink, one call or one each."""

from __future__ import annotations

from collections.abc import Sequence

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.base import EventFeed, deliver

EVENTS = [ev.Event("metric", rank, 1.0 + rank, {"step": 1, "values": {}}) for rank in range(3)]


def test_a_plain_sink_is_called_with_each_event_in_order() -> None:
    got: list[ev.Event] = []
    deliver(got.append, EVENTS)
    assert got == EVENTS


def test_a_feed_takes_the_whole_run_in_one_call_and_a_single_event_as_a_run_of_one() -> None:
    calls: list[list[ev.Event]] = []

    def many(events: Sequence[ev.Event]) -> None:
        calls.append(list(events))

    feed = EventFeed(many)
    deliver(feed, EVENTS)
    deliver(feed, [])  # nothing to hand: no call
    feed(EVENTS[0])
    assert calls == [EVENTS, EVENTS[:1]]
