"""The session runtime's pieces that need no group: frames and the reply to the notebook."""

from __future__ import annotations

import pickle
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import jobkey, session
from jupyter_disttrain.runtime.framing import send_frame
from jupyter_disttrain.runtime.session import (
    recv_frame,
    recv_message,
    send_message,
)

KEY = bytes(range(32))


class Marker:
    """Unpickling this writes a file: the proof that a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (Path.write_text, (str(self.path), "ran"))  # type: ignore[return-value]


def test_frames_round_trip_over_a_real_socket() -> None:
    left, right = socket.socketpair()
    with left, right:
        big = bytes(range(256)) * 40_000  # several recv() calls
        sender = threading.Thread(target=lambda: (send_frame(left, big), send_frame(left, b"")))
        sender.start()
        assert recv_frame(right) == big
        assert recv_frame(right) == b""
        sender.join()
        send_message(left, {"op": "run", "id": 3, "payload": b"\x00\x01"}, KEY)
        assert recv_message(right, KEY) == {"op": "run", "id": 3, "payload": b"\x00\x01"}


def test_a_closed_peer_and_an_oversized_frame_are_connection_errors() -> None:
    left, right = socket.socketpair()
    with right:
        left.sendall(struct.pack(">I", 10) + b"short")
        left.close()
        with pytest.raises(ConnectionError, match="closed"):
            recv_frame(right)
    left, right = socket.socketpair()
    with left, right:
        left.sendall(struct.pack(">I", session.MAX_FRAME + 1))
        with pytest.raises(ConnectionError, match="over the limit"):
            recv_frame(right)
    left, right = socket.socketpair()
    with left, right:
        send_frame(
            left, jobkey.signed(KEY, b"\x80\x05K\x01.", purpose="session")
        )  # a pickle of 1, not a dict
        with pytest.raises(ConnectionError, match="must be a dict"):
            recv_message(right, KEY)


ERROR = {"type": "KeyError", "module": "builtins", "message": "'x'", "traceback": "tb"}
STOPPED = {"type": "KeyboardInterrupt", "module": "builtins", "message": "", "traceback": ""}


def test_reply_is_rank_zeros_result_or_every_error_in_rank_order() -> None:
    ok = {"status": "ok"}
    first = {"status": "ok", "result": {"encoding": "cloudpickle+base64", "data": "gAVOLg=="}}
    assert session._reply(7, [first, ok]) == {
        "op": "reply",
        "id": 7,
        "status": "ok",
        "result": first["result"],
    }
    failed = session._reply(
        8, [ok, {"status": "error", "error": ERROR}, {"status": "interrupted", "error": STOPPED}]
    )
    assert failed["status"] == "error"
    assert [e["rank"] for e in failed["errors"]] == [1, 2]
    assert failed["errors"][0]["type"] == "KeyError"
    stopped = session._reply(9, [{"status": "interrupted", "error": STOPPED}, ok])
    assert stopped["status"] == "interrupted" and stopped["errors"][0]["rank"] == 0


def test_a_message_not_signed_with_the_job_key_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    left, right = socket.socketpair()
    with left, right:
        send_frame(left, pickle.dumps({"op": "run", "x": Marker(marker)}))
        with pytest.raises(ConnectionError, match="failed verification"):
            recv_message(right, KEY)
        send_message(left, {"op": "ping", "x": Marker(marker)}, bytes(32))  # another key
        with pytest.raises(ConnectionError, match="failed verification"):
            recv_message(right, KEY)
    assert not marker.exists()


def test_a_hello_frame_over_the_limit_is_refused_before_it_is_read() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(struct.pack(">I", 1 << 30) + b"x" * 1000)  # declares 1 GiB
        started = time.monotonic()
        with pytest.raises(ConnectionError, match=f"over the limit of {session.HELLO_LIMIT}"):
            session.recv_frame(right, session.HELLO_LIMIT, time.monotonic() + 5)
        assert time.monotonic() - started < 1.0


def test_a_silent_or_slow_peer_misses_the_hello_deadline() -> None:
    left, right = socket.socketpair()
    with left, right:
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="too slowly"):
            session.recv_frame(right, session.HELLO_LIMIT, time.monotonic() + 0.3)
        assert 0.25 < time.monotonic() - started < 2.0
        left.sendall(struct.pack(">I", 100) + b"a")  # a trickle: the deadline is for the frame
        with pytest.raises(ConnectionError, match="too slowly"):
            session.recv_frame(right, session.HELLO_LIMIT, time.monotonic() + 0.3)


def test_a_session_without_a_job_key_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jobkey.ENV_KEY_FILE, raising=False)
    with pytest.raises(RuntimeError, match="runs no cell it cannot authenticate"):
        session.session_key()
