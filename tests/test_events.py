from __future__ import annotations

import math

from jupyter_disttrain import events as ev
from jupyter_disttrain.runtime.protocol import encode


def test_protocol_line_round_trip() -> None:
    line = encode("metric", 3, step=7, values={"loss": 0.5, "acc": float("nan")})
    event = ev.parse_line(line + "\n", rank=None)
    assert event.kind == "metric"
    assert event.rank == 3
    assert event.get("step") == 7
    assert event.get("values")["loss"] == 0.5
    assert math.isnan(event.get("values")["acc"])
    assert "v" not in event.fields and "kind" not in event.fields


def test_plain_and_malformed_lines_are_logs() -> None:
    assert ev.parse_line("epoch 1 done\n", 2).fields == {"text": "epoch 1 done"}
    bad = ev.parse_line('##distrain {"kind": "metric", oops', 1)
    assert bad.kind == "log" and bad.rank == 1
    unknown = ev.parse_line('##distrain {"kind": "nope", "rank": 0}', 1)
    assert unknown.kind == "log"


def test_prefixed_protocol_line_is_found() -> None:
    # A launcher may prefix lines (e.g. "[default0]:"); the protocol still parses.
    line = "[default0]:" + encode("done", 0, seconds=1.5)
    event = ev.parse_line(line, None)
    assert event.kind == "done" and event.rank == 0 and event.get("seconds") == 1.5


def test_backend_events_serialise() -> None:
    for event in (
        ev.job_event("Failed", "Timeout", "too slow", t=5.0),
        ev.rank_event(3, "Exited", exit_code=1, reason="OOMKilled", t=6.0),
        ev.restart_event(2, "node lost", t=7.0),
    ):
        assert ev.from_json(ev.to_json(event)) == event


def test_first_copies_drops_a_relayed_repeat_and_forgets_the_oldest() -> None:
    from jupyter_disttrain.events import Event, FirstCopies

    copies = FirstCopies(frozenset({"metric"}), limit=2)
    line = Event("metric", 1, 10.0, {"step": 3, "values": {"loss": 1.0}})
    assert copies.first(line)
    assert not copies.first(Event("metric", 1, 10.0, {"step": 3, "values": {"loss": 1.0}}))
    assert copies.first(Event("metric", 2, 10.0, {"step": 3}))  # another rank's line
    assert copies.first(Event("log", 1, 10.0, {"text": "x"}))  # a kind not checked
    assert copies.first(Event("log", 1, 10.0, {"text": "x"}))
    assert copies.first(Event("metric", 1, 11.0, {"step": 4}))  # the third: line is forgotten
    assert copies.first(line)
