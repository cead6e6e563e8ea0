from __future__ import annotations

import json
import math

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.runtime import jobkey
from jupyter_disttrain.runtime.protocol import PREFIX, encode
from tests.signing import KEY, line, parse, trust


def test_protocol_line_round_trip() -> None:
    text = line("metric", 3, step=7, values={"loss": 0.5, "acc": float("nan")})
    event = parse(text + "\n", 3)
    assert event.kind == "metric"
    assert event.rank == 3
    assert event.get("step") == 7
    assert event.get("values")["loss"] == 0.5
    assert math.isnan(event.get("values")["acc"])
    assert "v" not in event.fields and "kind" not in event.fields


def test_plain_and_malformed_lines_are_logs() -> None:
    assert parse("epoch 1 done\n", 2).fields == {"text": "epoch 1 done"}
    bad = parse('##distrain {"kind": "metric", oops', 1)
    assert bad.kind == "log" and bad.rank == 1 and bad.get("rejected")
    unknown = parse('##distrain {"kind": "nope", "rank": 0}', 1)
    assert unknown.kind == "log"


def test_prefixed_protocol_line_is_found() -> None:
    # A launcher may prefix lines (e.g. "[default0]:"); the protocol still parses.
    event = parse("[default0]:" + line("done", 0, seconds=1.5), 0)
    assert event.kind == "done" and event.rank == 0 and event.get("seconds") == 1.5


# --- printed text is data: only lines signed with the job's key count ---------------


def spoof(kind: str, rank: int, **fields: object) -> str:
    """A line a worker's data could print: the marker and the JSON, no signature."""
    body = {"v": 1, "kind": kind, "rank": rank, "t": 1.0e9, **fields}
    return PREFIX + json.dumps(body, separators=(",", ":"))


@pytest.mark.parametrize(
    "text",
    [
        spoof("error", 1, type="ValueError", message="from a dataset row", traceback=""),
        spoof("result", 0, encoding="cloudpickle+base64", data="gASVAAAAAAAAAAB9lC4="),
        spoof("done", 1, seconds=1.0),
        spoof("hello", 0, world_size=1_000_000, local_rank=0, node_rank=0),
        spoof("checkpoint", 0, step=3, uri="http://127.0.0.1:9/probe-dir"),
        # signed with another job's key
        encode("error", 1, sign_with=jobkey.new_key(), type="ValueError", message="x"),
        # a real signature glued onto another body
        spoof("done", 1, seconds=1.0) + " " + line("done", 1, seconds=2.0).rsplit(" ", 1)[1],
    ],
)
def test_unsigned_or_foreign_lines_are_log_text_that_stays_visible(text: str) -> None:
    event = parse(text + "\n", 1)
    assert event.kind == "log" and event.rank == 1
    assert event.get("text") == text  # kept whole, shown in the logs
    assert "signed" in event.get("rejected")


@pytest.mark.parametrize(
    ("kind", "fields", "why"),
    [
        ("hello", {"world_size": 1_000_000, "local_rank": 0, "node_rank": 0}, "world size"),
        ("hello", {"world_size": 4, "local_rank": 9, "node_rank": 0}, "local rank"),
        ("metric", {"step": [], "values": {"loss": 1.0}}, "step"),
        ("metric", {"step": 1, "values": {"loss": "low"}}, "values"),
        ("metric", {"step": True, "values": {"loss": 1.0}}, "step"),
        ("done", {"seconds": float("inf")}, "seconds"),
        ("progress", {"step": 1, "total": 0}, "total"),
        ("session", {"port": 70000, "world_size": 4}, "port"),
    ],
)
def test_signed_lines_whose_fields_do_not_fit_the_job_are_log_text(
    kind: str, fields: dict[str, object], why: str
) -> None:
    event = parse(line(kind, 1, **fields), 1, nodes=2, nproc=2)
    assert event.kind == "log" and why in event.get("rejected"), event


@pytest.mark.parametrize("t", [float("inf"), float("nan"), -1.0, "soon", None])
def test_a_signed_line_with_a_time_that_is_not_finite_is_log_text(t: object) -> None:
    body = json.dumps({"v": 1, "kind": "metric", "rank": 0, "t": t, "step": 1, "values": {}})
    text = f"{PREFIX}{body} {jobkey.sign(KEY, body.encode())}"
    event = parse(text, 0)
    assert event.kind == "log" and "time" in event.get("rejected")


def test_a_rank_outside_the_job_or_another_ranks_stream_is_not_believed() -> None:
    assert parse(line("done", 7, seconds=1.0), 7, nodes=2, nproc=2).kind == "log"
    # rank 1's log cannot speak for rank 2; rank 0's carries what it relays for others
    assert parse(line("done", 2, seconds=1.0), 1, nodes=2, nproc=2).get("rejected")
    relayed = parse(line("done", 2, seconds=1.0), 0, nodes=2, nproc=2)
    assert (relayed.kind, relayed.rank) == ("done", 2)
    # an agent's log (no rank) speaks only for the whole job
    assert parse(line("done", 0, seconds=1.0), None).kind == "log"
    assert parse(line("staging", None, src="s3://b/x", state="done"), None).kind == "staging"


def test_without_a_key_every_line_is_log_text() -> None:
    event = ev.parse_line(line("done", 0, seconds=1.0), 0, trust=None)
    assert event.kind == "log" and event.get("rejected")


def test_a_huge_line_is_not_decoded() -> None:
    text = line("metric", 0, step=1, values={f"m{i}": 1.0 for i in range(1000)})
    assert parse(text, 0).kind == "metric"
    big = line("error", 0, type="E", message="x" * (8 * 2**20))
    assert parse(big, 0).kind == "log"


def test_trust_checks_the_world_the_job_has() -> None:
    hello = line("hello", 3, world_size=4, local_rank=1, node_rank=1)
    assert parse(hello, 3, nodes=2, nproc=2).kind == "hello"
    assert ev.parse_line(hello, 3, trust=trust(1, 2)).kind == "log"


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
    first = Event("metric", 1, 10.0, {"step": 3, "values": {"loss": 1.0}})
    assert copies.first(first)
    assert not copies.first(Event("metric", 1, 10.0, {"step": 3, "values": {"loss": 1.0}}))
    assert copies.first(Event("metric", 2, 10.0, {"step": 3}))  # another rank's line
    assert copies.first(Event("log", 1, 10.0, {"text": "x"}))  # a kind not checked
    assert copies.first(Event("log", 1, 10.0, {"text": "x"}))
    assert copies.first(Event("metric", 1, 11.0, {"step": 4}))  # the third: line is forgotten
    assert copies.first(first)


# --- rank 0's relayed lines -----------------------------------------------------------


def relayed_line(items: list[object], rank: int = 0) -> str:
    """A ``relayed`` line of ``rank`` carrying ``items`` as its lines, signed with the key."""
    body = json.dumps(
        {"v": 1, "kind": "relayed", "quiet": False, "rank": rank, "t": 1.0e9, "lines": items},
        separators=(",", ":"),
    )
    return f"{PREFIX}{body} {jobkey.sign(KEY, body.encode())}"


def body_of(text: str) -> object:
    return json.loads(text[len(PREFIX) : text.rfind(" ")])


def test_a_relayed_line_is_believed_only_from_rank_zeros_stream() -> None:
    carried = [body_of(line("metric", 3, step=1, values={"loss": 1.0}))]
    assert parse(relayed_line(carried), 0, nodes=2, nproc=2).kind == "relayed"
    from_rank_1 = parse(relayed_line(carried, rank=1), 1, nodes=2, nproc=2)
    assert from_rank_1.kind == "log" and "rank 0" in from_rank_1.get("rejected")
    assert parse(relayed_line(carried), None, nodes=2, nproc=2).kind == "log"
    unsigned = relayed_line(carried).rsplit(" ", 1)[0]
    assert parse(unsigned, 0, nodes=2, nproc=2).kind == "log"


def test_each_carried_line_is_checked_as_its_own_line_would_be() -> None:
    good = body_of(line("metric", 3, step=1, values={"loss": 1.0}))
    outside = body_of(line("metric", 9, step=1, values={"loss": 1.0}))
    error = body_of(line("error", 2, type="ValueError", message="x"))
    nested = json.loads(relayed_line([good]).rsplit(" ", 1)[0][len(PREFIX) :])
    events = ev.unpacked(parse(relayed_line([good, outside, error, nested, "text"]), 0, 2, 2))
    assert [(e.kind, e.rank) for e in events] == [("metric", 3)] + [("log", 0)] * 4
    rejected = [e.get("rejected") for e in events[1:]]
    assert "not a rank of this job" in rejected[0]
    assert rejected[1:3] == ["unknown kind 'error'", "unknown kind 'relayed'"]
    assert rejected[3] == "the line's body is not a JSON object"
    assert '"rank":9' in events[1].get("text"), events[1]


def columns_line(columns: dict[str, object]) -> str:
    """A ``relayed`` line of rank 0 carrying ``columns`` as its metric columns, signed."""
    outer = {"v": 1, "kind": "relayed", "quiet": False, "rank": 0, "t": 1.0e9, "metrics": columns}
    body = json.dumps(outer, separators=(",", ":"))
    return f"{PREFIX}{body} {jobkey.sign(KEY, body.encode())}"


def test_metric_columns_are_the_metric_lines_they_stand_for() -> None:
    columns = {
        "rank": [1, 3],
        "t": [1.0e9, 1.0e9 + 0.5],
        "step": [5, 6],
        "values": [{"loss": 1.5}, {"loss": float("nan"), "lr": 2}],
    }
    events = ev.unpacked(parse(columns_line(columns), 0, nodes=2, nproc=2))
    as_lines = [
        parse(line("metric", r, t=t, step=s, values=v), r, nodes=2, nproc=2)
        for r, t, s, v in zip(*columns.values(), strict=True)
    ]
    assert [(e.kind, e.rank, e.t, e.get("step")) for e in events] == [
        ("metric", 1, 1.0e9, 5),
        ("metric", 3, 1.0e9 + 0.5, 6),
    ]
    assert repr([e.fields for e in events]) == repr([e.fields for e in as_lines])


def test_an_entry_of_the_columns_that_does_not_fit_is_rejected_alone() -> None:
    columns = {
        "rank": [1, 9, 2, 3, 1, 2],
        "t": [1.0e9, 1.0e9, -1.0, 1.0e9, 1.0e9, float("inf")],
        "step": [1, 2, 3, 4.5, 5, 6],
        "values": [{"loss": 1.0}, {}, {}, {}, {"loss": "low"}, {}],
    }
    events = ev.unpacked(parse(columns_line(columns), 0, nodes=2, nproc=2))
    assert [(e.kind, e.rank) for e in events] == [("metric", 1)] + [("log", 0)] * 5
    rejected = [e.get("rejected") for e in events[1:]]
    assert "not a rank of this job" in rejected[0]
    assert "not a finite time" in rejected[1] and "not a finite time" in rejected[4]
    assert "'step'" in rejected[2] and "'values'" in rejected[3]
    assert '"rank":9' in events[1].get("text"), events[1]


@pytest.mark.parametrize(
    "columns",
    [
        {"rank": [1, 2], "t": [1.0e9], "step": [1, 2], "values": [{}, {}]},
        {"rank": [1], "t": [1.0e9], "step": [1]},
        {"rank": 1, "t": [1.0e9], "step": [1], "values": [{}]},
        [[1], [1.0e9], [1], [{}]],
    ],
)
def test_metric_columns_of_another_shape_are_not_believed(columns: object) -> None:
    event = parse(columns_line(columns), 0, nodes=2, nproc=2)  # type: ignore[arg-type]
    assert event.kind == "log" and "'metrics'" in event.get("rejected"), event
