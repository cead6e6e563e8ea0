"""One line-to-event path for every backend's streams."""

from __future__ import annotations

from jupyter_disttrain.backends.streams import line_event
from tests import signing


def test_a_signed_line_of_the_streams_rank_is_its_event() -> None:
    raw = signing.line("metric", 1, step=3, values={"loss": 0.5})
    event = line_event(raw.encode(), 1, signing.trust(1, 2), now=7.0)
    assert (event.kind, event.rank, event.get("step")) == ("metric", 1, 3), event
    assert "source" not in event.fields


def test_an_unsigned_look_alike_stays_text_of_its_stream() -> None:
    raw = signing.line("metric", 0, step=3, values={"loss": 0.5}).rsplit(" ", 1)[0]
    event = line_event(raw, None, signing.trust(1, 2), source="agent-0")
    assert event.kind == "log" and event.get("source") == "agent-0"
    assert event.get("rejected") == "the line is not signed with the job's key"


def test_a_shared_stream_names_the_rank_by_its_prefix() -> None:
    signed = signing.line("metric", 1, step=1, values={"loss": 1.0})
    shared = signing.trust(1, 2)
    event = line_event(f"[rank 1] {signed}", None, shared, source="pod-0", prefixed=True)
    assert (event.kind, event.rank) == ("metric", 1) and "source" not in event.fields
    plain = line_event("pip: installing", None, None, source="pod-0", prefixed=True)
    assert (plain.kind, plain.rank, plain.get("source")) == ("log", None, "pod-0")
    printed = line_event("[rank 1] hello", None, None, source="pod-0", prefixed=True)
    assert (printed.rank, printed.get("text")) == (1, "hello") and "source" not in printed.fields


def test_undecodable_bytes_are_replaced_not_raised() -> None:
    event = line_event(b"\xff\xfe text", 0, None)
    assert event.kind == "log" and event.get("text") == "\ufffd\ufffd text"
