"""The session runtime's pieces that need no group: frames and the reply to the notebook."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from jupyter_disttrain.runtime import session
from jupyter_disttrain.runtime.session import (
    recv_frame,
    recv_message,
    send_frame,
    send_message,
)


def test_frames_round_trip_over_a_real_socket() -> None:
    left, right = socket.socketpair()
    with left, right:
        big = bytes(range(256)) * 40_000  # several recv() calls
        sender = threading.Thread(target=lambda: (send_frame(left, big), send_frame(left, b"")))
        sender.start()
        assert recv_frame(right) == big
        assert recv_frame(right) == b""
        sender.join()
        send_message(left, {"op": "run", "id": 3, "payload": b"\x00\x01"})
        assert recv_message(right) == {"op": "run", "id": 3, "payload": b"\x00\x01"}


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
        send_frame(left, b"\x80\x05K\x01.")  # a pickle of 1, not of a dict
        with pytest.raises(ConnectionError, match="must be a dict"):
            recv_message(right)


ERROR = {"type": "KeyError", "module": "builtins", "message": "'x'", "traceback": "tb"}
STOPPED = {"type": "KeyboardInterrupt", "module": "builtins", "message": "", "traceback": ""}


def test_reply_is_rank_zeros_result_or_every_error_in_rank_order() -> None:
    ok = {"status": "ok"}
    first = {"status": "ok", "result": {"encoding": "cloudpickle+base64", "data": "gAVOLg=="}}
    assert session._reply(7, [first, ok]) == {
        "op": "reply", "id": 7, "status": "ok", "result": first["result"],
    }  # fmt: skip
    failed = session._reply(8, [ok, {"status": "error", "error": ERROR},
                                {"status": "interrupted", "error": STOPPED}])  # fmt: skip
    assert failed["status"] == "error"
    assert [e["rank"] for e in failed["errors"]] == [1, 2]
    assert failed["errors"][0]["type"] == "KeyError"
    stopped = session._reply(9, [{"status": "interrupted", "error": STOPPED}, ok])
    assert stopped["status"] == "interrupted" and stopped["errors"][0]["rank"] == 0
