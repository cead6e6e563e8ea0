"""A warm worker group: every rank runs cells, one after another, until the session ends.

Standard library, torch and cloudpickle only. A session is a job whose
payload carries ``session`` settings (a token, an idle timeout, an interrupt
grace period); :func:`serve` replaces running one cell. Each rank keeps one
``__main__`` namespace for the whole session, so what a cell binds is there
for the next.

The notebook talks to rank 0 only. Rank 0 listens on ``127.0.0.1:0`` and
announces the port with a ``session`` protocol line; the first frame of a
connection must carry the session's token. Frames are a 4-byte big-endian
length and a body: the hello frames are JSON, the others pickles of dicts:

* notebook -> rank 0: ``{"op": "run", "id": ID, "payload": BYTES}`` (a
  payload envelope as for a job), ``{"op": "interrupt", "id": ID}``,
  ``{"op": "ping"}``, ``{"op": "stop"}``.
* rank 0 -> notebook: ``{"op": "reply", "id": ID, "status": S, ...}`` with
  ``S`` ``ok`` (``result``: the ``result`` line's fields of rank 0's value),
  ``error`` / ``interrupted`` (``errors``: ``{"rank": R, **error fields}``)
  or ``lost`` (``ranks``: the ranks that did not finish within the grace
  period after an interrupt: stuck, their group must be restarted);
  ``{"op": "pong"}``, ``{"op": "stopped"}``, ``{"op": "busy", "id": ID}``.

Rank 0 fans cells out over the job's own c10d store (the store torchrun
gives the workers): ``cell/N`` holds cell N for every rank, ``done/N/R``
each rank's outcome, ``int/N/R`` an interrupt for rank R. Every thread that
blocks on the store has its own client, so a blocking read never holds up
another thread. A watcher thread per rank turns an interrupt into
``KeyboardInterrupt`` in the rank's main thread (``_thread.interrupt_main``);
a rank stuck inside a collective does not come back, and rank 0 says so.
Each rank writes ``cell`` protocol lines (``phase`` ``start``/``end``) around
every cell, so the notebook knows when a cell's output is complete.
"""

from __future__ import annotations

import _thread
import datetime
import hmac
import json
import os
import pickle
import queue
import select
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any, Final, Protocol

from . import relay, report
from .cell import main_module, run_cell

PREFIX: Final = "distrain-session/"
HEADER: Final = struct.Struct(">I")
#: Largest frame either side accepts (a cell's payload is capped lower by the notebook).
MAX_FRAME: Final = 1 << 30
#: Seconds ranks have to come back after an interrupt before the group counts as stuck.
DEFAULT_GRACE: Final = 5.0
STORE_TIMEOUT: Final = datetime.timedelta(days=30)
STOP: Final = "stop"


class CellTools(Protocol):
    """What a rank needs from the worker runtime to run a cell (the ``worker`` module)."""

    def build_namespace(self, payload: dict[str, Any]) -> dict[str, Any]: ...
    def warn_packages(self, payload: dict[str, Any]) -> None: ...
    def encode_exception(self, exc: BaseException) -> dict[str, Any]: ...
    def encode_result(self, value: Any, result_dir: str | None) -> dict[str, Any]: ...


# --------------------------------------------------------------------------- framing


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Write one length-prefixed frame."""
    sock.sendall(HEADER.pack(len(body)) + body)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes; :class:`ConnectionError` when the peer closed first."""
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the session connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes:
    """Read one length-prefixed frame."""
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    if size > MAX_FRAME:
        raise ConnectionError(f"a session frame of {size} bytes is over the limit")
    return recv_exact(sock, size)


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write one pickled message frame."""
    send_frame(sock, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def recv_message(sock: socket.socket) -> dict[str, Any]:
    """Read one pickled message frame."""
    message = pickle.loads(recv_frame(sock))
    if not isinstance(message, dict):
        raise ConnectionError("a session message must be a dict")
    return message


# --------------------------------------------------------------------------- the store


def control_store() -> Any:
    """A new client of the job's c10d store (torchrun's ``MASTER_ADDR``/``MASTER_PORT``)."""
    import torch.distributed as dist

    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ["MASTER_PORT"])
    tcp: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's stubs' exports)
    prefix: Any = getattr(dist, "PrefixStore")  # noqa: B009
    base = tcp(host, port, is_master=False, timeout=STORE_TIMEOUT, wait_for_workers=False)
    run = os.environ.get("DISTRAIN_RUN_ID", "")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return prefix(f"{PREFIX}{run}/{restart}/", base)


# --------------------------------------------------------------------------- every rank


class _Watcher:
    """Turns ``int/N/R`` into a KeyboardInterrupt in the main thread while cell N runs."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.lock = threading.Lock()
        self.running: int | None = None
        self.cells: queue.Queue[int] = queue.Queue()
        self.store = control_store()
        threading.Thread(target=self._run, name="distrain-session-watch", daemon=True).start()

    def begin(self, n: int) -> None:
        with self.lock:
            self.running = n
        self.cells.put(n)

    def end(self) -> None:
        with self.lock:
            self.running = None

    def _run(self) -> None:
        while True:
            n = self.cells.get()
            try:
                value = self.store.get(f"int/{n}/{self.rank}")
            except Exception:  # the store went away: the job is ending
                return
            with self.lock:
                if value == b"int" and self.running == n:
                    _thread.interrupt_main()


def _outcome(message: dict[str, Any], module: Any, rank: int, tools: CellTools) -> dict[str, Any]:
    """Run one cell in ``module``; its outcome for ``done/N/R``."""
    from . import checkpoint

    try:
        envelope = pickle.loads(message["payload"])
        tools.warn_packages(envelope)
        module.__dict__.update(tools.build_namespace(envelope))
        sys.modules["__main__"] = module
        value = run_cell(envelope["source"], module.__dict__, f"<distrain-cell-{message['id']}>")
        checkpoint.wait_for_saves()
        out: dict[str, Any] = {"status": "ok"}
        if rank == 0:
            out["result"] = tools.encode_result(value, None)
        return out
    except KeyboardInterrupt as exc:
        return {"status": "interrupted", "error": tools.encode_exception(_from_cell(exc))}
    except BaseException as exc:
        return {"status": "error", "error": tools.encode_exception(_from_cell(exc))}


def _from_cell(exc: BaseException) -> BaseException:
    """``exc`` with its traceback starting at the first cell frame (not this runtime's)."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<distrain-cell"):
        tb = tb.tb_next
    return exc.with_traceback(tb) if tb is not None else exc


def serve(payload: dict[str, Any], names: dict[str, Any], tools: CellTools) -> None:
    """Run this rank's side of a session until rank 0 says stop (see the module docstring)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    settings = dict(payload["session"])
    # interrupt_main() does nothing while SIGINT is ignored (as launchers leave it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    store = control_store()
    watcher = _Watcher(rank)
    if rank == 0:
        _Server(settings, world).start()
    module = main_module(dict(names))
    n = 0
    while True:
        n += 1
        try:
            message = pickle.loads(store.get(f"cell/{n}"))
        except KeyboardInterrupt:  # a late interrupt of the previous cell
            n -= 1
            continue
        if message.get("op") == STOP:
            return
        report.emit("cell", id=message["id"], phase="start")
        watcher.begin(n)
        try:
            outcome = _outcome(message, module, rank, tools)
            watcher.end()
            time.sleep(0.001)  # an interrupt asked for just before the end lands here
        except KeyboardInterrupt:
            watcher.end()
            outcome = {"status": "interrupted", "error": {"type": "KeyboardInterrupt",
                       "module": "builtins", "message": "", "traceback": ""}}  # fmt: skip
        sys.stdout.flush()
        sys.stderr.flush()
        report.emit("cell", id=message["id"], phase="end", status=outcome["status"])
        relay.sync()  # this cell's lines reach rank 0's log before rank 0 replies
        store.set(f"done/{n}/{rank}", pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
        store.set(f"int/{n}/{rank}", b"end")


# --------------------------------------------------------------------------- rank 0


class _Server:
    """Rank 0's connection to the notebook: runs cells on every rank, one at a time."""

    def __init__(self, settings: dict[str, Any], world: int) -> None:
        self.token = str(settings["token"]).encode()
        self.idle = float(settings.get("idle_timeout") or 0)
        self.grace = float(settings.get("grace") or DEFAULT_GRACE)
        self.world = world
        self.store = control_store()
        self.gatherer = control_store()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = int(self.listener.getsockname()[1])
        self.n = 0
        self.last_active = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self._run, name="distrain-session-server", daemon=True).start()
        report.emit("session", port=self.port, world_size=self.world)

    # -- connections ----------------------------------------------------------
    def _run(self) -> None:
        """Serve the notebook: one connection at a time; a newly authenticated one replaces it."""
        conn: socket.socket | None = None
        while True:
            ready = self._wait([self.listener] + ([conn] if conn is not None else []))
            if ready is None:
                self._stop(f"no cell for {self.idle:g} s (--idle-timeout)")
                return
            if self.listener in ready:
                new, _ = self.listener.accept()
                if self._authenticate(new):
                    if conn is not None:
                        conn.close()
                    conn = new
                else:
                    new.close()
                continue
            assert conn is not None
            try:
                if self._serve(conn):
                    return
            except (OSError, ConnectionError, EOFError, pickle.UnpicklingError):
                conn.close()  # the notebook went away; it may connect again
                conn = None
            self.last_active = time.monotonic()

    def _wait(self, sockets: list[socket.socket]) -> list[socket.socket] | None:
        """The sockets ready to read; None when the session stayed idle past its timeout."""
        while True:
            wait = None if not self.idle else self.idle - (time.monotonic() - self.last_active)
            if wait is not None and wait <= 0:
                return None
            ready, _, _ = select.select(sockets, [], [], wait)
            if ready:
                return ready

    def _authenticate(self, conn: socket.socket) -> bool:
        try:
            conn.settimeout(10.0)
            hello = json.loads(recv_frame(conn))
            ok = isinstance(hello, dict) and hmac.compare_digest(
                str(hello.get("token", "")).encode(), self.token
            )
            answer: dict[str, Any] = {"ok": ok, "world_size": self.world, "pid": os.getpid()}
            if not ok:
                answer["error"] = "wrong session token"
            send_frame(conn, json.dumps(answer).encode())
            conn.settimeout(None)
        except (ValueError, ConnectionError, OSError):
            return False
        return ok

    def _serve(self, conn: socket.socket) -> bool:
        """Answer one message; True when the session was stopped."""
        message = recv_message(conn)
        op = message.get("op")
        self.last_active = time.monotonic()
        if op == "ping":
            send_message(conn, {"op": "pong"})
        elif op == STOP:
            self._stop("stopped by the notebook")
            send_message(conn, {"op": "stopped"})
            return True
        elif op == "run":
            send_message(conn, self._run_cell(conn, message))
        return False

    def _stop(self, why: str) -> None:
        print(f"distrain: session ending: {why}", file=sys.stderr, flush=True)
        self.n += 1
        self.store.set(f"cell/{self.n}", pickle.dumps({"op": STOP}))

    # -- one cell -------------------------------------------------------------
    def _run_cell(self, conn: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        n, cell_id = self.n, message.get("id")
        gathered: dict[int, dict[str, Any]] = {}
        wake_r, wake_w = socket.socketpair()  # the gatherer wakes the select below when done

        def gather() -> None:
            try:
                for r in range(self.world):
                    gathered[r] = pickle.loads(self.gatherer.get(f"done/{n}/{r}"))
                wake_w.send(b"x")
            except Exception:
                return
            finally:
                wake_w.close()

        self.store.set(f"cell/{n}", pickle.dumps({"op": "run", "id": cell_id,
                                                  "payload": message["payload"]}))  # fmt: skip
        threading.Thread(target=gather, name="distrain-session-gather", daemon=True).start()
        deadline: float | None = None
        try:
            while True:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return self._lost(n, cell_id)
                ready, _, _ = select.select([conn, wake_r], [], [], wait)
                if wake_r in ready:
                    break
                if conn not in ready:
                    continue
                incoming = recv_message(conn)
                if incoming.get("op") == "interrupt" and deadline is None:
                    for r in range(self.world):
                        self.store.set(f"int/{n}/{r}", b"int")
                    deadline = time.monotonic() + self.grace
                elif incoming.get("op") == "run":
                    send_message(conn, {"op": "busy", "id": incoming.get("id")})
                elif incoming.get("op") == "ping":
                    send_message(conn, {"op": "pong"})
        finally:
            wake_r.close()  # a gatherer still waiting (stuck ranks) writes into nothing
        relay.sync()  # other nodes' lines of the cell are in this log before the reply
        return _reply(cell_id, [gathered[r] for r in range(self.world)])

    def _lost(self, n: int, cell_id: Any) -> dict[str, Any]:
        missing = [r for r in range(self.world) if not self.store.check([f"done/{n}/{r}"])]
        return {"op": "reply", "id": cell_id, "status": "lost", "ranks": missing}


def _reply(cell_id: Any, outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """The notebook's reply from every rank's outcome (rank order)."""
    errors = [{"rank": r, **o["error"]} for r, o in enumerate(outcomes) if "error" in o]
    if any(o["status"] == "error" for o in outcomes):
        return {"op": "reply", "id": cell_id, "status": "error", "errors": errors}
    if errors:
        return {"op": "reply", "id": cell_id, "status": "interrupted", "errors": errors}
    return {"op": "reply", "id": cell_id, "status": "ok", "result": outcomes[0].get("result")}
