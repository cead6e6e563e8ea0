"""The rank side of the debugger: its line, its channel's framing and authentication, in-process.

A thread stands in for a rank's main thread: it stops at ``breakpoint()`` under
the runtime's hook and is driven over a real 127.0.0.1 socket with the job key.
"""

from __future__ import annotations

import io
import json
import os
import pdb
import socket
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from jupyter_disttrain.linecheck import Shape, problem
from jupyter_disttrain.runtime import debugger, debugwire, framing, jobkey
from jupyter_disttrain.runtime.cell import run_payload

KEY = b"k" * 32
SHAPE = Shape(world_size=2, nodes=1, nproc=2)


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[bytes]:
    path = tmp_path / "key"
    path.write_bytes(KEY)
    monkeypatch.setenv(jobkey.ENV_KEY_FILE, str(path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(sys, "breakpointhook", sys.breakpointhook)
    monkeypatch.setattr(pdb, "set_trace", pdb.set_trace)
    yield KEY


def paused_lines(out: io.StringIO) -> list[dict[str, object]]:
    lines = [ln.split(" ", 2)[1] for ln in out.getvalue().splitlines() if "##distrain" in ln]
    return [json.loads(body) for body in lines]


def until_paused(thread: threading.Thread, out: io.StringIO) -> None:
    """Wait until ``thread`` stopped and said where: :func:`debugger.paused` counts a stopped
    thread just before its ``paused`` line is written (the hang watch must never miss one),
    so the line is waited for, not only the count."""
    while not (debugger.paused() and paused_lines(out)):
        assert thread.is_alive(), out.getvalue()
        threading.Event().wait(0.01)


def connect(port: int, key: bytes) -> debugwire.Link:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    hello = debugwire.recv(sock, key, debugwire.HELLO_LIMIT)
    debugwire.send(sock, key, {"op": "hello", "nonce": hello["nonce"]})
    return debugwire.Link(sock, key, str(hello["nonce"]), "notebook")


def test_a_stopped_thread_says_where_and_answers_over_the_channel(keyed: bytes) -> None:
    debugger.install()
    out = io.StringIO()
    done = threading.Event()

    def rank_main() -> None:
        with redirect_stdout(out):
            secret = {"idx": 8123}
            breakpoint()
            secret["idx"] += 1
            done.set()

    thread = threading.Thread(target=rank_main, daemon=True)
    thread.start()
    until_paused(thread, out)
    fields = paused_lines(out)[0]
    assert fields["kind"] == "paused" and fields["rank"] == 1 and fields["function"] == "rank_main"
    assert (
        problem(
            "paused",
            1,
            fields["t"],
            {k: v for k, v in fields.items() if k not in ("v", "kind", "rank", "t")},
            SHAPE,
        )
        is None
    )
    link = connect(int(fields["port"]), keyed)  # type: ignore[call-overload]
    link.send({"op": "cmd", "line": "p secret", "wait": 10})
    answer = link.recv(1 << 20)
    assert answer["output"] == "{'idx': 8123}\n" and answer["paused"]
    assert answer["from"] == "rank" and answer["n"] == 1
    link.send({"op": "cmd", "line": "c", "wait": 10})
    assert link.recv(1 << 20)["paused"] is False
    assert done.wait(10) and not debugger.paused()
    assert [f["kind"] for f in paused_lines(out)] == ["paused", "resumed"]
    link.sock.close()


def test_quitting_ends_the_stop_and_raises_in_the_rank(keyed: bytes) -> None:
    debugger.install()
    out = io.StringIO()
    raised: list[BaseException] = []

    def rank_main() -> None:
        with redirect_stdout(out):
            try:
                breakpoint()
                raised.append(AssertionError("ran on"))  # BdbQuit comes at this line
            except BaseException as exc:
                raised.append(exc)

    thread = threading.Thread(target=rank_main, daemon=True)
    thread.start()
    until_paused(thread, out)
    link = connect(int(paused_lines(out)[-1]["port"]), keyed)  # type: ignore[call-overload]
    link.send({"op": "cmd", "line": "q", "wait": 10})
    assert link.recv(1 << 20)["paused"] is False
    thread.join(10)
    assert [type(e).__name__ for e in raised] == ["BdbQuit"] and not debugger.paused()
    assert paused_lines(out)[-1]["kind"] == "resumed"
    link.sock.close()


class _Watched:
    """An object whose death runs a Python function (a weakref callback) on the thread that
    drops it: as the garbage collector does, at any moment."""


def test_breakpoint_stops_at_its_own_next_line_not_in_a_callback_run_before_it(
    keyed: bytes,
) -> None:
    """A function the rank's thread runs between ``breakpoint()`` and its next line (here a
    weakref callback: ``breakpoint``'s argument dies as the call returns) is not where the
    rank stops: it stops at its next line, and a quit raises there, not in the callback."""
    debugger.install()
    out = io.StringIO()
    raised: list[BaseException] = []
    callbacks: list[str] = []
    refs: list[weakref.ref[_Watched]] = []

    def watched() -> _Watched:
        dying = _Watched()
        refs.append(weakref.ref(dying, lambda _: callbacks.append("ran")))
        return dying

    def rank_main() -> None:
        with redirect_stdout(out):
            try:
                breakpoint(watched())  # its argument dies as the call returns
                raised.append(AssertionError("ran on"))
            except BaseException as exc:
                raised.append(exc)

    thread = threading.Thread(target=rank_main, daemon=True)
    thread.start()
    until_paused(thread, out)
    where = paused_lines(out)[-1]
    assert where["function"] == "rank_main" and callbacks == ["ran"], (where, callbacks)
    link = connect(int(where["port"]), keyed)  # type: ignore[call-overload]
    link.send({"op": "cmd", "line": "q", "wait": 10})
    assert link.recv(1 << 20)["paused"] is False
    thread.join(10)
    assert [type(e).__name__ for e in raised] == ["BdbQuit"] and not debugger.paused()
    link.sock.close()


def test_the_channel_refuses_a_wrong_key_a_replay_and_an_oversized_hello(keyed: bytes) -> None:
    channel = debugger._Channel(keyed)  # a rank that stopped: its listener, no prompt yet
    for attempt in ("wrong key", "too big"):
        with socket.create_connection(("127.0.0.1", channel.port), timeout=10) as sock:
            hello = debugwire.recv(sock, keyed, debugwire.HELLO_LIMIT)
            if attempt == "wrong key":
                debugwire.send(sock, b"x" * 32, {"op": "hello", "nonce": hello["nonce"]})
            else:
                sock.sendall(framing.HEADER.pack(debugwire.HELLO_LIMIT + 1))
            assert sock.recv(1) == b""
    link = connect(channel.port, keyed)
    link.send({"op": "state"})
    assert link.recv(1 << 20)["paused"] is False  # not stopped: it says so
    link.sent = 0  # a replayed frame (its number again) ends the connection
    link.send({"op": "state"})
    assert link.sock.recv(1) == b""
    link.sock.close()
    channel.listener.close()


def test_without_a_key_breakpoint_is_the_standard_debugger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jobkey.ENV_KEY_FILE, raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO("p 6 * 7\nc\n"))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    debugger.set_trace()
    assert "42" in out.getvalue()
    assert os.environ.get(jobkey.ENV_KEY_FILE) is None


CELL = "total = 0\nfor step in range(5):\n    total += step\nresult = total\n"


def run_until_paused(
    payload: dict[str, object], namespace: dict[str, object], out: io.StringIO
) -> threading.Thread:
    """Run ``payload`` as a rank's cell in a thread until it stops at a breakpoint (its output,
    redirected by the caller, in ``out``); the thread, still running."""
    thread = threading.Thread(target=lambda: run_payload(payload, namespace), daemon=True)
    thread.start()
    until_paused(thread, out)
    return thread


def test_armed_breakpoints_stop_a_cell_and_answer_stack_variables_and_evaluations(
    keyed: bytes,
) -> None:
    out = io.StringIO()
    namespace: dict[str, object] = {}
    payload = {"source": CELL, "breakpoints": [{"line": 3, "condition": "step == 2"}]}
    with redirect_stdout(out):
        thread = run_until_paused(payload, namespace, out)
        fields = paused_lines(out)[0]
        assert (fields["file"], fields["line"]) == ("<distrain-cell>", 3)
        link = connect(int(fields["port"]), keyed)  # type: ignore[call-overload]
        link.send({"op": "stack"})
        frames = link.recv(1 << 20)["frames"]
        assert [(f["file"], f["line"], f["function"]) for f in frames] == [
            ("<distrain-cell>", 3, "<module>")
        ]
        top = frames[0]["index"]
        link.send({"op": "vars", "frame": top, "scope": "locals"})
        shown = {v["name"]: v["value"] for v in link.recv(1 << 20)["variables"]}
        assert shown["step"] == "2" and shown["total"] == "1"
        link.send({"op": "eval", "frame": top, "expr": "total * 100 + step"})
        assert link.recv(1 << 20)["result"] == "102"
        link.send({"op": "eval", "frame": top, "expr": "nope"})
        assert link.recv(1 << 20)["error"] == "NameError: name 'nope' is not defined"
        link.send({"op": "vars", "frame": top + 1})
        assert "no frame" in link.recv(1 << 20)["error"]
        link.send({"op": "cmd", "line": "n", "wait": 10})
        moved = link.recv(1 << 20)
        assert moved["paused"] and moved["line"] == 2
        link.send({"op": "cmd", "line": "c", "wait": 10})
        assert link.recv(1 << 20)["paused"] is False
        thread.join(10)
    assert namespace["result"] == 10 and sys.gettrace() is None


def test_without_breakpoints_a_cell_is_not_traced(keyed: bytes) -> None:
    seen: dict[str, object] = {}
    run_payload({"source": "import sys\ntraced = sys.gettrace()\n", "breakpoints": []}, seen)
    assert seen["traced"] is None


def test_a_breakpoint_inside_a_cell_function_stops_there(keyed: bytes) -> None:
    source = (
        "import sys\ndef plain():\n    return 1\n"
        "def g(a):\n    b = a + 1\n    return b\nfirst = plain()\nout = g(5)\n"
    )
    out = io.StringIO()
    namespace: dict[str, object] = {}
    payload = {"source": source, "breakpoints": [{"line": 6}]}
    with redirect_stdout(out):
        thread = run_until_paused(payload, namespace, out)
        fields = paused_lines(out)[0]
        assert (fields["line"], fields["function"]) == (6, "g")
        link = connect(int(fields["port"]), keyed)  # type: ignore[call-overload]
        link.send({"op": "cmd", "line": "p b", "wait": 10})
        assert link.recv(1 << 20)["output"] == "6\n"
        link.send({"op": "cmd", "line": "c", "wait": 10})
        assert link.recv(1 << 20)["paused"] is False
        thread.join(10)
    assert namespace["out"] == 6 and namespace["first"] == 1


def test_breakpoints_given_to_a_stopped_rank_replace_its_own(keyed: bytes) -> None:
    out = io.StringIO()
    namespace: dict[str, object] = {}
    payload = {"source": CELL, "breakpoints": [{"line": 3}]}
    with redirect_stdout(out):
        thread = run_until_paused(payload, namespace, out)
        link = connect(int(paused_lines(out)[0]["port"]), keyed)  # type: ignore[call-overload]
        spots = [{"line": 4}, {"line": 99}, {"line": 3, "condition": "step > 100"}]
        link.send({"op": "breaks", "file": "<distrain-cell>", "spots": spots})
        answer = link.recv(1 << 20)
        assert answer["set"] == 2 and answer["refused"] == [
            "99: Line <distrain-cell>:99 does not exist"
        ]
        link.send({"op": "cmd", "line": "c", "wait": 10})
        assert link.recv(1 << 20)["paused"] is False
        while len(paused_lines(out)) < 3:  # paused, resumed, paused again
            assert thread.is_alive(), out.getvalue()
            threading.Event().wait(0.01)
        again = paused_lines(out)[2]
        assert (again["kind"], again["line"]) == ("paused", 4), out.getvalue()
        link.send({"op": "cmd", "line": "p total", "wait": 10})
        assert link.recv(1 << 20)["output"] == "10\n"
        link.send({"op": "cmd", "line": "c", "wait": 10})
        assert link.recv(1 << 20)["paused"] is False
        thread.join(10)
    assert namespace["result"] == 10
