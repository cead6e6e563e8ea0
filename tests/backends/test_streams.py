"""One line-to-event path for every backend's streams."""

from __future__ import annotations

from jupyter_disttrain.backends.streams import line_events
from jupyter_disttrain.runtime import jobkey
from jupyter_disttrain.runtime.protocol import relayed
from tests import signing


def test_a_signed_line_of_the_streams_rank_is_its_event() -> None:
    raw = signing.line("metric", 1, step=3, values={"loss": 0.5})
    [event] = line_events(raw.encode(), 1, signing.trust(1, 2), now=7.0)
    assert (event.kind, event.rank, event.get("step")) == ("metric", 1, 3), event
    assert "source" not in event.fields


def test_an_unsigned_look_alike_stays_text_of_its_stream() -> None:
    raw = signing.line("metric", 0, step=3, values={"loss": 0.5}).rsplit(" ", 1)[0]
    [event] = line_events(raw, None, signing.trust(1, 2), source="agent-0")
    assert event.kind == "log" and event.get("source") == "agent-0"
    assert event.get("rejected") == "the line is not signed with the job's key"


def test_a_shared_stream_names_the_rank_by_its_prefix() -> None:
    signed = signing.line("metric", 1, step=1, values={"loss": 1.0})
    shared = signing.trust(1, 2)
    [event] = line_events(f"[rank 1] {signed}", None, shared, source="pod-0", prefixed=True)
    assert (event.kind, event.rank) == ("metric", 1) and "source" not in event.fields
    [plain] = line_events("pip: installing", None, None, source="pod-0", prefixed=True)
    assert (plain.kind, plain.rank, plain.get("source")) == ("log", None, "pod-0")
    [printed] = line_events("[rank 1] hello", None, None, source="pod-0", prefixed=True)
    assert (printed.rank, printed.get("text")) == (1, "hello") and "source" not in printed.fields


def test_undecodable_bytes_are_replaced_not_raised() -> None:
    [event] = line_events(b"\xff\xfe text", 0, None)
    assert event.kind == "log" and event.get("text") == "\ufffd\ufffd text"


def test_rank_zeros_relayed_line_is_each_line_it_carries_in_order() -> None:
    sent = [signing.line("metric", rank, step=2, values={"loss": rank / 10}) for rank in (5, 3, 7)]
    [line] = relayed(sent, jobkey.Signer(signing.KEY))
    shared = signing.trust(2, 4)
    events = line_events(f"[rank 0] {line}", None, shared, source="pod-0", prefixed=True)
    assert [(e.kind, e.rank, e.get("step"), e.get("values")) for e in events] == [
        ("metric", 5, 2, {"loss": 0.5}),
        ("metric", 3, 2, {"loss": 0.3}),
        ("metric", 7, 2, {"loss": 0.7}),
    ]
    expected = [line_events(one, 0, signing.trust(2, 4))[0] for one in sent]
    assert [(e.t, e.fields) for e in events] == [(e.t, e.fields) for e in expected]
