"""A rank's debugger: ``breakpoint()``, ``pdb.set_trace()``, post-mortem, driven from the notebook.

Standard library only. :func:`install` (the worker's set-up) points
``sys.breakpointhook`` and ``pdb.set_trace`` here; nothing else happens
until a rank stops: no thread, no socket. At its first stop a rank opens one
listener on ``127.0.0.1:0`` (a thread accepts) and runs :class:`pdb.Pdb`
with its own stdin and stdout: commands come from the notebook, answers go
back to it. Each stop writes a signed ``paused`` protocol line (``file``,
``line``, ``function``, ``port``, ``pid``, and ``exception`` for a
post-mortem); ``resumed`` when the rank runs on (``c``). The notebook
connects to ``port`` (on Kubernetes through the API server's port-forward
to the rank's pod).

The channel is authenticated with the job key both ways (:mod:`.debugwire`).

Requests: ``{"op": "state"}``, ``{"op": "cmd", "line": TEXT, "wait": S}``, and for the
Debugger panel ``{"op": "stack"}``, ``{"op": "vars", "frame": I, "scope": "locals"}`` and
``{"op": "eval", "frame": I, "expr": TEXT}`` (answered as data by :mod:`.frames`), and
``{"op": "breaks", "file": F, "spots": [{"line", "condition"}]}`` (F's breakpoints now);
answers ``{"op": "answer", "output": TEXT, "paused": BOOL, ...frame}`` where
the frame is ``file``, ``line``, ``function`` and ``source`` (numbered lines
around the current one). A command whose stop does not come within
``wait`` seconds (``n`` over a long call) answers with what was printed and
``"paused": false``.

Paused time counts as activity for the hang watch (:func:`paused`), and it
counts against the job's ``--timeout`` like any other time.
"""

from __future__ import annotations

import os
import queue
import secrets
import socket
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import Any, Final

from . import framing, jobkey, report
from .debugwire import HELLO_LIMIT, HELLO_SECONDS, Link, recv, send

ENV_POST_MORTEM: Final = "DISTRAIN_POST_MORTEM"
#: Largest request frame a rank reads from an authenticated notebook.
REQUEST_LIMIT: Final = 1 << 20
#: Longest answer text (the rest is cut, with a note).
ANSWER_CHARS: Final = 1 << 20
#: Connections saying hello at once; more are closed at once.
MAX_HELLOS: Final = 4
#: Source lines shown each side of the current one.
CONTEXT_LINES: Final = 5
PROMPT: Final = "(Pdb) "

_lock = threading.Lock()
_channel: _Channel | None = None
_stopped = 0  # threads stopped in the debugger now


def paused() -> bool:
    """True while a thread of this rank is stopped in the debugger (the hang watch asks)."""
    return _stopped > 0


def post_mortem_on() -> bool:
    """True when the job asked for post-mortem debugging (``--post-mortem``)."""
    return os.environ.get(ENV_POST_MORTEM, "") not in ("", "0")


# --------------------------------------------------------------------------- where a rank is


def frame_info(frame: FrameType, lineno: int) -> dict[str, Any]:
    """``file``, ``line``, ``function`` and numbered ``source`` lines around ``lineno``."""
    import linecache

    code = frame.f_code
    first = max(1, lineno - CONTEXT_LINES)
    source = []
    for number in range(first, lineno + CONTEXT_LINES + 1):
        text = linecache.getline(code.co_filename, number, frame.f_globals)
        if not text and number > lineno:
            break
        source.append([number, text.rstrip("\n")[:400]])
    return {"file": code.co_filename, "line": lineno, "function": code.co_name, "source": source}


# --------------------------------------------------------------------------- the channel


class _Stdout:
    """pdb's stdout: collects what it prints for the pending answer (the prompt left out)."""

    def __init__(self, channel: _Channel) -> None:
        self.channel = channel

    def write(self, text: str) -> int:
        if text != PROMPT:
            self.channel.output(text)
        return len(text)

    def flush(self) -> None:
        return None


class _Stdin:
    """pdb's stdin: each ``readline`` answers the last command and waits for the next."""

    def __init__(self, channel: _Channel) -> None:
        self.channel = channel

    def readline(self) -> str:
        return self.channel.next_command() + "\n"


class _Channel:
    """This rank's listener and the state the notebook sees (one per process, made lazily)."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.rank = report.rank()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(MAX_HELLOS)
        self.port = int(self.listener.getsockname()[1])
        self.hellos = threading.BoundedSemaphore(MAX_HELLOS)
        self.cond = threading.Condition()
        self.commands: queue.Queue[str] = queue.Queue()
        self.debugger: Any = None  # the Pdb stopped now (its frame is the current one)
        self.at_prompt = False
        self.where: dict[str, Any] | None = None
        self.exception = ""
        self.out: list[str] = []
        self.pending = 0  # number of the command being run (0: none)
        self.answered = 0  # number of the last command answered
        self.answer: dict[str, Any] = {}
        self.issued = 0
        self.serving = threading.Lock()  # one command at a time, whatever the connections
        threading.Thread(target=self._accept, name="distrain-debug-accept", daemon=True).start()

    # -- the stopped thread ---------------------------------------------------
    def output(self, text: str) -> None:
        with self.cond:
            self.out.append(text)

    def _frame(self) -> dict[str, Any]:
        pdb_ = self.debugger
        frame, lineno = pdb_.stack[pdb_.curindex]
        return frame_info(frame, lineno)

    def stop(self, debugger: Any, exception: str = "") -> None:
        """A thread stopped: say where (a ``paused`` line) and wait for commands."""
        global _stopped
        with self.cond:
            first = self.debugger is None
            self.debugger = debugger
            self.exception = exception
        if first:
            with _lock:
                _stopped += 1
        where = self._frame()
        fields = {k: where[k] for k in ("file", "line", "function")}
        extra = {"exception": exception[:400]} if exception else {}
        if getattr(debugger, "asked", False):  # paused on the notebook's request
            debugger.asked = False
            extra["reason"] = "pause"
        report.emit("paused", port=self.port, pid=os.getpid(), **fields, **extra)

    def next_command(self) -> str:
        """At pdb's prompt: answer the pending command, then wait for the next."""
        with self.cond:
            self.where = self._frame()
            self.at_prompt = True
            self._finish(True)
        line = self.commands.get()
        with self.cond:
            self.at_prompt = False
        return line

    def resumed(self) -> None:
        """The stopped thread runs on (``c``, ``q``): answer, and say so."""
        global _stopped
        with self.cond:
            stopped = self.debugger is not None
            self.where = None
            self.debugger = None
            self.at_prompt = False
            self._finish(False)
        if stopped:
            with _lock:
                _stopped -= 1
        report.emit("resumed")

    def _finish(self, stopped: bool) -> None:
        """(Under ``cond``) the answer of the pending command, if any."""
        if self.pending and self.answered < self.pending:
            text = "".join(self.out)
            if len(text) > ANSWER_CHARS:
                text = text[:ANSWER_CHARS] + "\n... (answer cut)\n"
            self.answer = {"output": text, **self._state(stopped)}
            self.answered = self.pending
            self.out.clear()
            self.cond.notify_all()

    def _state(self, stopped: bool) -> dict[str, Any]:
        state: dict[str, Any] = {"op": "answer", "rank": self.rank, "paused": stopped}
        if stopped and self.where is not None:
            state.update(self.where)
        if stopped and self.exception:
            state["exception"] = self.exception
        return state

    # -- the notebook's requests (connection threads) --------------------------
    def run(self, line: str, wait: float) -> dict[str, Any]:
        """Run one pdb command at the prompt; its answer (see the module docstring)."""
        with self.serving:
            with self.cond:
                if not self.at_prompt:
                    return {**self._state(False), "output": "", "error": "the rank is running"}
                self.issued += 1
                self.pending = number = self.issued
                self.out.clear()
                self.commands.put(line)
                deadline = time.monotonic() + wait
                while self.answered < number:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        text, self.out = "".join(self.out), []
                        return {**self._state(False), "output": text, "running": True}
                    self.cond.wait(left)
                return dict(self.answer)

    def state(self) -> dict[str, Any]:
        """Where the rank is now (no command run)."""
        with self.cond:
            return {**self._state(self.at_prompt), "output": ""}

    def inspect(self, message: dict[str, Any]) -> dict[str, Any]:
        """A ``stack``, ``vars`` or ``eval`` request, answered from the stopped frames (the
        stopped thread waits at the prompt meanwhile; an evaluation runs in this thread)."""
        from . import frames  # only a stopped rank imports it

        with self.cond:
            if not self.at_prompt:
                return {**self._state(False), "error": "the rank is running"}
            stack, current = self.debugger.stack, self.debugger.curindex
            if message["op"] == "stack":
                return {**self._state(True), "frames": frames.user_stack(stack, current)}
            if message["op"] == "breaks":
                return {**self._state(True), **self._breaks(message)}
            index = message.get("frame")
            if not isinstance(index, int) or not 0 <= index <= current:
                return {**self._state(True), "error": f"no frame {index!r} on this rank"}
            frame = stack[index][0]
            local = self.debugger.curframe_locals if index == current else frame.f_locals
            if message["op"] == "vars":
                scope = frame.f_globals if message.get("scope") == "globals" else local
                return {**self._state(True), **frames.variables(scope)}
            expr = message.get("expr")
            if not isinstance(expr, str):
                return {**self._state(True), "error": "eval needs an expression"}
            return {**self._state(True), **frames.evaluate(expr[:4096], frame, local)}

    def _breaks(self, message: dict[str, Any]) -> dict[str, Any]:
        """(Under ``cond``, stopped) replace the breakpoints of ``file`` with ``spots``."""
        file, spots = message.get("file"), message.get("spots")
        if not isinstance(file, str) or not isinstance(spots, list):
            return {"error": "breaks needs a file and a list of spots"}
        self.debugger.clear_all_file_breaks(file)
        refused = []
        for spot in spots[:1000]:
            line = spot.get("line") if isinstance(spot, dict) else None
            condition = spot.get("condition") if isinstance(spot, dict) else None
            problem = (
                self.debugger.set_break(file, line, cond=condition or None)
                if isinstance(line, int)
                else "not a line"
            )
            if problem:
                refused.append(f"{line}: {problem}")
        return {"set": len(spots) - len(refused), "refused": refused}

    def _accept(self) -> None:
        framing.accept_each(self.listener, self.hellos, self._serve, "distrain-debug-conn")

    def _hello(self, conn: socket.socket) -> Link | None:
        try:
            nonce = secrets.token_hex(16)
            conn.settimeout(HELLO_SECONDS)
            send(
                conn,
                self.key,
                {"op": "hello", "rank": self.rank, "pid": os.getpid(), "nonce": nonce},
            )
            hello = recv(conn, self.key, HELLO_LIMIT, time.monotonic() + HELLO_SECONDS)
            if hello.get("op") != "hello" or hello.get("nonce") != nonce:
                return None
            conn.settimeout(None)
            return Link(conn, self.key, nonce, "rank")
        except (ConnectionError, OSError):
            return None
        finally:
            self.hellos.release()

    def _serve(self, conn: socket.socket) -> None:
        link = self._hello(conn)
        try:
            while link is not None:
                message = link.recv(REQUEST_LIMIT)
                op = message.get("op")
                if op == "cmd" and isinstance(message.get("line"), str):
                    wait = message.get("wait")
                    wait = float(wait) if isinstance(wait, int | float) and wait > 0 else 30.0
                    link.send(self.run(message["line"][:4096], min(wait, 3600.0)))
                elif op in ("stack", "vars", "eval", "breaks"):
                    link.send(self.inspect(message))
                else:
                    link.send(self.state())
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            conn.close()


def _channel_or_none() -> _Channel | None:
    global _channel
    key = jobkey.load()
    if key is None:
        return None
    with _lock:
        if _channel is None:
            _channel = _Channel(key)
        return _channel


# --------------------------------------------------------------------------- pdb


def _make_pdb(channel: _Channel) -> Any:
    import pdb

    class RankPdb(pdb.Pdb):
        """pdb reading the notebook's commands and writing its answers."""

        def __init__(self) -> None:
            super().__init__(
                stdin=_Stdin(channel),  # type: ignore[arg-type]
                stdout=_Stdout(channel),  # type: ignore[arg-type]
                nosigint=True,
                readrc=False,
            )
            self.use_rawinput = False
            self.prompt = PROMPT
            self._resuming = False
            self.exception = ""
            self.asked = False  # the next stop is a pause the notebook asked for
            self._spans: dict[Any, set[int]] = {}
            self._entry: FrameType | None = None  # set_trace's frame, while it runs

        def set_trace(self, frame: FrameType | None = None) -> None:
            """Stop at the next line ``frame`` runs (or at its return), as a pause does.
            Bdb's own first stop is the next event of any frame on this thread, which can
            be a function run there before that line (a weakref callback of the garbage
            collector): the rank would stop in it, and a quit there be swallowed."""
            self._entry = frame if frame is not None else sys._getframe(1)
            try:
                super().set_trace(self._entry)
            finally:
                self._entry = None

        def set_step(self) -> None:
            if self._entry is not None:  # set_trace's first stop (see there)
                self.set_next(self._entry)
            else:
                super().set_step()

        def dispatch_call(self, frame: FrameType, arg: Any) -> Any:
            """Running on to breakpoints: a function none of whose lines has one is not
            traced (pdb would trace every function of the breakpoint's file)."""
            if self.botframe is not None and self.stoplineno == -1:
                code = frame.f_code
                spots = self.breaks.get(self.canonic(code.co_filename))
                if not spots:
                    return None
                span = self._spans.get(code)
                if span is None:
                    span = self._spans[code] = {line for _, _, line in code.co_lines() if line}
                if span.isdisjoint(spots):
                    return None
            return super().dispatch_call(frame, arg)

        def interaction(self, frame: FrameType | None, traceback: Any) -> None:
            self._resuming = False
            self.setup(frame, traceback)
            channel.stop(self, self.exception)
            self.forget()
            try:
                super().interaction(frame, traceback)
            except BaseException:  # an interrupt (a session's), BdbQuit: the rank runs on
                channel.resumed()
                raise
            if self._resuming or traceback is not None:
                channel.resumed()

        def set_continue(self) -> None:
            self._resuming = True
            super().set_continue()

        def set_quit(self) -> None:
            self._resuming = True
            super().set_quit()

    return RankPdb()


def set_trace(*_args: Any, header: str | None = None, **_kwargs: Any) -> None:
    """``breakpoint()`` / ``pdb.set_trace()`` on a rank: stop here, driven from the notebook.

    Without a job key (a plain run) the standard debugger runs instead.
    """
    channel = _channel_or_none()
    frame = sys._getframe(1)
    if channel is None:
        import pdb

        pdb.Pdb().set_trace(frame)
        return
    debugger = _make_pdb(channel)
    if header is not None:
        channel.output(header + "\n")
    debugger.set_trace(frame)


def post_mortem(exc: BaseException) -> None:
    """Stop in the frame that raised ``exc`` until the notebook says ``c`` (then return)."""
    channel = _channel_or_none()
    tb: TracebackType | None = exc.__traceback__
    if channel is None or tb is None:
        return
    debugger = _make_pdb(channel)
    debugger.exception = f"{type(exc).__name__}: {exc}"
    debugger.reset()
    debugger.interaction(None, tb)


def arm(breakpoints: list[dict[str, Any]], filename: str) -> Any:
    """Stop at ``breakpoints`` (``{"line", "condition"}`` of ``filename``) in code this thread
    runs next; the armed debugger, or None without breakpoints or a job key (then nothing is
    traced: no cost). :func:`disarm` it when the code returns."""
    if not breakpoints:
        return None
    return arm_below(sys._getframe(1), filename, breakpoints)


def arm_below(bottom: FrameType | None, filename: str, breakpoints: list[dict[str, Any]]) -> Any:
    """A new debugger stopping only at ``breakpoints`` of ``filename`` in code run below
    frame ``bottom`` (None: the outermost), tracing this thread and kept as the running
    cell's (:func:`armed`); None without a job key."""
    debugger = new_debugger()
    if debugger is None:
        return None
    debugger.botframe = bottom
    debugger._set_stopinfo(bottom, None, -1)
    set_breaks(debugger, filename, breakpoints)
    sys.settrace(debugger.trace_dispatch)
    _armed[:] = [debugger]
    return debugger


def set_breaks(debugger: Any, filename: str, breakpoints: list[dict[str, Any]]) -> None:
    """Make ``breakpoints`` (``{"line", "condition"}``) ``debugger``'s in ``filename``."""
    debugger.clear_all_file_breaks(filename)
    for spot in breakpoints:
        debugger.set_break(filename, int(spot["line"]), cond=spot.get("condition") or None)


def disarm(debugger: Any) -> None:
    """Stop tracing for :func:`arm`'s ``debugger`` (None: nothing to do)."""
    if debugger is not None:
        _armed.clear()
        sys.settrace(None)
        debugger.clear_all_breaks()


_armed: list[Any] = []  # the debugger tracing the running cell for its breakpoints, if any


def armed() -> Any:
    """The debugger tracing the running cell for its breakpoints (None: none)."""
    return _armed[0] if _armed else None


def new_debugger() -> Any:
    """A fresh debugger driven from the notebook (None without a job key)."""
    channel = _channel_or_none()
    if channel is None:
        return None
    debugger = _make_pdb(channel)
    debugger.reset()
    return debugger


class _PdbPatcher:
    """A meta-path finder that points ``pdb.set_trace`` here once ``pdb`` is imported (so a
    rank that never imports pdb never pays for it)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "pdb":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            module.set_trace = set_trace

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_last: list[BaseException] = []


def keep_last(exc: BaseException) -> None:
    """Keep ``exc`` (a session cell's error, with its frames) for :func:`post_mortem_last`."""
    _last[:] = [exc]


def post_mortem_last() -> bool:
    """Stop in the frame where this rank's last failed session cell raised, until ``c``;
    False when no cell of this rank failed."""
    if not _last:
        return False
    post_mortem(_last[0])
    return True


def install() -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` here (no thread, no socket, no import)."""
    sys.breakpointhook = set_trace
    pdb = sys.modules.get("pdb")
    if pdb is not None:
        setattr(pdb, "set_trace", set_trace)  # noqa: B010 (a module of no declared type)
    elif not any(isinstance(f, _PdbPatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _PdbPatcher())
