"""The debugger channel's wire: signed JSON frames and each connection's numbering."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from jupyter_disttrain.runtime import debugwire, framing, jobkey

KEY = b"k" * 32


@pytest.fixture
def pair() -> Iterator[tuple[debugwire.Link, debugwire.Link]]:
    """A rank's and a notebook's ends of one connection, sharing a nonce."""
    rank_end, notebook_end = socket.socketpair()
    with rank_end, notebook_end:
        yield (
            debugwire.Link(rank_end, KEY, "n1", "rank"),
            debugwire.Link(notebook_end, KEY, "n1", "notebook"),
        )


def test_frames_go_both_ways_numbered(pair: tuple[debugwire.Link, debugwire.Link]) -> None:
    rank, notebook = pair
    notebook.send({"op": "state"})
    notebook.send({"op": "stack"})
    assert [rank.recv(1 << 10)["op"] for _ in range(2)] == ["state", "stack"]
    rank.send({"op": "answer"})
    assert notebook.recv(1 << 10) == {"op": "answer", "nonce": "n1", "from": "rank", "n": 1}


def test_a_replayed_frame_is_refused(pair: tuple[debugwire.Link, debugwire.Link]) -> None:
    rank, notebook = pair
    notebook.send({"op": "state"})
    rank.recv(1 << 10)
    notebook.sent = 0  # the same number again
    notebook.send({"op": "state"})
    with pytest.raises(ConnectionError, match="out of sequence"):
        rank.recv(1 << 10)


def test_a_reflected_frame_is_refused(pair: tuple[debugwire.Link, debugwire.Link]) -> None:
    """A frame the rank sent, sent back to it, names the rank's own side."""
    rank, _ = pair
    reflected = debugwire.Link(pair[1].sock, KEY, "n1", "rank")
    reflected.send({"op": "state"})
    with pytest.raises(ConnectionError, match="out of sequence"):
        rank.recv(1 << 10)


def test_a_frame_of_another_connection_is_refused(
    pair: tuple[debugwire.Link, debugwire.Link],
) -> None:
    rank, notebook = pair
    debugwire.Link(notebook.sock, KEY, "other", "notebook").send({"op": "state"})
    with pytest.raises(ConnectionError, match="out of sequence"):
        rank.recv(1 << 10)


def test_a_frame_signed_with_another_key_or_not_an_object_is_refused() -> None:
    writer, reader = socket.socketpair()
    with writer, reader:
        debugwire.send(writer, b"y" * 32, {"op": "state"})
        with pytest.raises(ConnectionError, match="failed verification"):
            debugwire.recv(reader, KEY, 1 << 10)
        framing.send_frame(writer, jobkey.signed(KEY, b"[1, 2]", purpose="debugger"))
        with pytest.raises(ConnectionError, match="must be a JSON object"):
            debugwire.recv(reader, KEY, 1 << 10)


def test_a_frame_over_the_limit_is_refused_before_it_is_read() -> None:
    writer, reader = socket.socketpair()
    with writer, reader:
        writer.sendall(framing.HEADER.pack(debugwire.HELLO_LIMIT + 1))  # no body follows
        with pytest.raises(ConnectionError):
            debugwire.recv(reader, KEY, debugwire.HELLO_LIMIT)
