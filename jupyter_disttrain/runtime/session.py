"""A warm worker group: every rank runs cells, one after another, until the session ends.

Standard library, torch and cloudpickle only. A session is a job whose
payload carries ``session`` settings (a token, an idle timeout, an interrupt
grace period); :func:`serve` replaces running one cell. Each rank keeps one
``__main__`` namespace for the whole session, so what a cell binds is there
for the next.

The notebook talks to rank 0 only. Rank 0 listens on ``127.0.0.1:0`` and
announces the port with a ``session`` protocol line. Frames are a 4-byte
big-endian length and a body. A connection's first frame (the hello, JSON)
must carry the session's token within :data:`HELLO_SECONDS` and
:data:`HELLO_LIMIT` bytes; each connection says hello in its own thread, so
a client that never does holds up nobody. The other frames are pickles of
dicts signed with the job key (:func:`.jobkey.signed`; the notebook has the
key of the payload it made), checked before they are unpickled, both ways:

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
gives the workers), through a :class:`.jobstore.SignedStore`: ``cell/N``
holds cell N for every rank and ``done/N/R`` each rank's outcome, both
sealed with the job key (another user can reach the store: it reads
neither the cell's captured values nor its result, and cannot write a cell
that runs); ``int/N/R`` holds a signed interrupt for rank R. A value that
fails verification is refused (a line on that rank's stderr) and the rank
waits for the real one. Without a job key a session does not start. Every
thread that blocks on the store has its own client, so a blocking read
never holds up another thread. A watcher thread per rank turns an
interrupt into ``KeyboardInterrupt`` in the rank's main thread
(``_thread.interrupt_main``); a rank stuck inside a collective does not
come back, and rank 0 says so. Each rank writes ``cell`` protocol lines
(``phase`` ``start``/``end``) around every cell, so the notebook knows when
a cell's output is complete.
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
import sys
import threading
import time
from typing import Any, Final, Protocol

from . import debugger, framing, jobkey, relay, report
from .cell import main_module, register_source, run_cell
from .env import ENV_RUN_ID
from .framing import send_frame
from .jobstore import SignedStore, framework_store, job_key, worker_round

PREFIX: Final = "distrain-session/"
#: Largest frame either side accepts once connected (a cell's payload is capped lower).
MAX_FRAME: Final = 1 << 30
#: Largest hello frame: nothing bigger is read from a connection that has not said its token.
HELLO_LIMIT: Final = 64 << 10
#: Seconds a new connection has to send its hello.
HELLO_SECONDS: Final = 5.0
#: Connections saying hello at once; more are closed at once.
MAX_HELLOS: Final = 16
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


def recv_frame(sock: socket.socket, limit: int = MAX_FRAME, deadline: float | None = None) -> bytes:
    """Read one length-prefixed frame of at most ``limit`` bytes (checked before reading it)."""
    return framing.recv_frame(sock, limit, deadline, "session")


def send_message(sock: socket.socket, message: dict[str, Any], key: bytes) -> None:
    """Write one pickled message frame, signed with the job ``key``."""
    send_frame(
        sock,
        jobkey.signed(
            key, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), purpose="session"
        ),
    )


def recv_message(sock: socket.socket, key: bytes) -> dict[str, Any]:
    """Read one message frame; :class:`ConnectionError` unless ``key`` signed it (then it is
    not unpickled) or it is not a dict."""
    try:
        body = jobkey.unsigned(key, recv_frame(sock), purpose="session")
    except jobkey.BadSignature as exc:
        raise ConnectionError(f"a session message failed verification: {exc}") from None
    message = pickle.loads(body)
    if not isinstance(message, dict):
        raise ConnectionError("a session message must be a dict")
    return message


# --------------------------------------------------------------------------- the store


def control_store(key: bytes) -> SignedStore:
    """A new client of the job's c10d store (torchrun's ``MASTER_ADDR``/``MASTER_PORT``),
    signing and checking with ``key``. A framework's own store (JAX's coordination
    service, see :func:`.jobstore.use_store`) is used, scoped, where there is one."""
    run = os.environ.get(ENV_RUN_ID, "")
    scope = f"{PREFIX}{run}/{worker_round()}/"
    own = framework_store()
    if own is not None:
        return SignedStore(own.scoped(scope), key, scope)
    import torch.distributed as dist

    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ["MASTER_PORT"])
    tcp: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's stubs' exports)
    prefix: Any = getattr(dist, "PrefixStore")  # noqa: B009
    base = tcp(host, port, is_master=False, timeout=STORE_TIMEOUT, wait_for_workers=False)
    return SignedStore(prefix(scope, base), key, scope)


def session_key() -> bytes:
    """The job key a session needs; RuntimeError naming the fix when this worker has none."""
    key = job_key()
    if key is None:
        raise RuntimeError(
            f"this session's worker has no job key (${jobkey.ENV_KEY_FILE} names no readable key "
            "file): a session runs no cell it cannot authenticate; start the session again "
            "(its backend gives every worker the key)"
        )
    return key


# --------------------------------------------------------------------------- every rank


class _Watcher:
    """Turns ``int/N/R`` into a KeyboardInterrupt in the main thread while cell N runs."""

    def __init__(self, rank: int, key: bytes) -> None:
        self.rank = rank
        self.lock = threading.Lock()
        self.running: int | None = None
        self.cells: queue.Queue[int] = queue.Queue()
        self.store = control_store(key)
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
                value = self.store.wait(f"int/{n}/{self.rank}")
            except Exception:  # the store went away: the job is ending
                return
            with self.lock:
                if value == b"int" and self.running == n:
                    _thread.interrupt_main()


def _outcome(message: dict[str, Any], module: Any, rank: int, tools: CellTools) -> dict[str, Any]:
    """Run one cell in ``module``; its outcome for ``done/N/R``."""
    from .checkpoint import api as checkpoint

    try:
        envelope = pickle.loads(message["payload"])
        tools.warn_packages(envelope)
        module.__dict__.update(tools.build_namespace(envelope))
        sys.modules["__main__"] = module
        filename = f"<distrain-cell-{message['id']}>"
        register_source(envelope["source"], filename)  # the breakpoints' lines must exist
        debugger.arm(list(envelope.get("breakpoints") or []), filename)
        try:
            value = run_cell(envelope["source"], module.__dict__, filename)
        finally:
            debugger.disarm(debugger.armed())
        checkpoint.wait_for_saves()
        out: dict[str, Any] = {"status": "ok"}
        if rank == 0:
            out["result"] = tools.encode_result(value, None)
        return out
    except KeyboardInterrupt as exc:
        return {"status": "interrupted", "error": tools.encode_exception(_from_cell(exc))}
    except BaseException as exc:
        if debugger.post_mortem_on() and isinstance(exc, Exception):
            debugger.post_mortem(exc)  # paused in the raising frame until the notebook says c
        elif isinstance(exc, Exception):
            debugger.keep_last(exc)  # for %distrain_debug --last
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
    key = session_key()
    # interrupt_main() does nothing while SIGINT is ignored (as launchers leave it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    store = control_store(key)
    watcher = _Watcher(rank, key)
    if rank == 0:
        _Server(settings, world, key).start()
    module = main_module(dict(names))
    n = 0
    while True:
        n += 1
        try:
            message = pickle.loads(store.wait_sealed(f"cell/{n}"))
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
            outcome = {
                "status": "interrupted",
                "error": {
                    "type": "KeyboardInterrupt",
                    "module": "builtins",
                    "message": "",
                    "traceback": "",
                },
            }
        sys.stdout.flush()
        sys.stderr.flush()
        report.emit("cell", id=message["id"], phase="end", status=outcome["status"])
        relay.sync()  # this cell's lines reach rank 0's log before rank 0 replies
        store.set_sealed(
            f"done/{n}/{rank}", pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        )
        store.set(f"int/{n}/{rank}", b"end")


# --------------------------------------------------------------------------- rank 0


class _Server:
    """Rank 0's connection to the notebook: runs cells on every rank, one at a time.

    An acceptor thread takes connections and gives each its own thread for
    the hello; an authenticated connection is handed to the serving thread
    (``arrivals``, with a byte on ``wake_w``), where it replaces the last one.
    """

    def __init__(self, settings: dict[str, Any], world: int, key: bytes) -> None:
        self.token = str(settings["token"]).encode()
        self.idle = float(settings.get("idle_timeout") or 0)
        self.grace = float(settings.get("grace") or DEFAULT_GRACE)
        self.world = world
        self.key = key
        self.store = control_store(key)
        self.gatherer = control_store(key)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(MAX_HELLOS)
        self.port = int(self.listener.getsockname()[1])
        self.hellos = threading.BoundedSemaphore(MAX_HELLOS)
        self.arrivals: queue.Queue[socket.socket] = queue.Queue()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.n = 0
        self.last_active = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self._accept, name="distrain-session-accept", daemon=True).start()
        threading.Thread(target=self._run, name="distrain-session-server", daemon=True).start()
        report.emit("session", port=self.port, world_size=self.world)

    # -- connections ----------------------------------------------------------
    def _accept(self) -> None:
        framing.accept_each(self.listener, self.hellos, self._hello, "distrain-session-hello")

    def _hello(self, conn: socket.socket) -> None:
        try:
            ok = self._authenticate(conn)
        finally:
            self.hellos.release()
        if not ok:
            conn.close()
            return
        self.arrivals.put(conn)
        self.wake_w.send(b"x")

    def _authenticate(self, conn: socket.socket) -> bool:
        """Read the hello (bounded in size and time) and answer it; True for the right token."""
        try:
            deadline = time.monotonic() + HELLO_SECONDS
            hello = json.loads(recv_frame(conn, HELLO_LIMIT, deadline))
            ok = isinstance(hello, dict) and hmac.compare_digest(
                str(hello.get("token", "")).encode(), self.token
            )
            answer: dict[str, Any] = {"ok": ok, "world_size": self.world, "pid": os.getpid()}
            if not ok:
                answer["error"] = "wrong session token"
            conn.settimeout(HELLO_SECONDS)
            send_frame(conn, json.dumps(answer).encode())
            conn.settimeout(None)
        except (ValueError, ConnectionError, OSError):
            return False
        return ok

    def _adopt(self, conn: socket.socket | None) -> socket.socket | None:
        """The newest authenticated connection (the older ones are closed)."""
        try:
            while self.wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                new = self.arrivals.get_nowait()
            except queue.Empty:
                return conn
            if conn is not None:
                conn.close()
            conn = new

    def _run(self) -> None:
        """Serve the notebook: one connection at a time; a newly authenticated one replaces it."""
        conn: socket.socket | None = None
        while True:
            ready = self._wait([self.wake_r] + ([conn] if conn is not None else []))
            if ready is None:
                self._stop(f"no cell for {self.idle:g} s (--idle-timeout)")
                return
            if self.wake_r in ready:
                conn = self._adopt(conn)
                self.last_active = time.monotonic()  # a notebook that just said hello is active
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

    def _serve(self, conn: socket.socket) -> bool:
        """Answer one message; True when the session was stopped."""
        message = recv_message(conn, self.key)
        op = message.get("op")
        self.last_active = time.monotonic()
        if op == "ping":
            send_message(conn, {"op": "pong"}, self.key)
        elif op == STOP:
            self._stop("stopped by the notebook")
            send_message(conn, {"op": "stopped"}, self.key)
            return True
        elif op == "run":
            send_message(conn, self._run_cell(conn, message), self.key)
        return False

    def _stop(self, why: str) -> None:
        print(f"distrain: session ending: {why}", file=sys.stderr, flush=True)
        self.n += 1
        self.store.set_sealed(f"cell/{self.n}", pickle.dumps({"op": STOP}))

    # -- one cell -------------------------------------------------------------
    def _run_cell(self, conn: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        n, cell_id = self.n, message.get("id")
        gathered: dict[int, dict[str, Any]] = {}
        done_r, done_w = socket.socketpair()  # the gatherer wakes the select below when done

        def gather() -> None:
            try:
                for r in range(self.world):
                    gathered[r] = pickle.loads(self.gatherer.wait_sealed(f"done/{n}/{r}"))
                done_w.send(b"x")
            except Exception:
                return
            finally:
                done_w.close()

        cell = {"op": "run", "id": cell_id, "payload": message["payload"]}
        self.store.set_sealed(f"cell/{n}", pickle.dumps(cell, protocol=pickle.HIGHEST_PROTOCOL))
        threading.Thread(target=gather, name="distrain-session-gather", daemon=True).start()
        deadline: float | None = None
        try:
            while True:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return self._lost(n, cell_id)
                ready, _, _ = select.select([conn, done_r], [], [], wait)
                if done_r in ready:
                    break
                if conn not in ready:
                    continue
                incoming = recv_message(conn, self.key)
                if incoming.get("op") == "interrupt" and deadline is None:
                    for r in range(self.world):
                        self.store.set(f"int/{n}/{r}", b"int")
                    deadline = time.monotonic() + self.grace
                elif incoming.get("op") == "run":
                    send_message(conn, {"op": "busy", "id": incoming.get("id")}, self.key)
                elif incoming.get("op") == "ping":
                    send_message(conn, {"op": "pong"}, self.key)
        finally:
            done_r.close()  # a gatherer still waiting (stuck ranks) writes into nothing
        relay.sync()  # other nodes' lines of the cell are in this log before the reply
        return _reply(cell_id, [gathered[r] for r in range(self.world)])

    def _lost(self, n: int, cell_id: Any) -> dict[str, Any]:
        finished = self._finished(n)
        missing = [r for r in range(self.world) if r not in finished]
        return {"op": "reply", "id": cell_id, "status": "lost", "ranks": missing}

    def _finished(self, n: int) -> set[int]:
        """The ranks whose (verified) outcome of cell ``n`` is in the store."""
        done = set()
        for r in range(self.world):
            name = f"done/{n}/{r}"
            try:
                if self.store.check([name]):
                    self.store.get_sealed(name)
                    done.add(r)
            except jobkey.BadSignature:
                continue
        return done


def _reply(cell_id: Any, outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """The notebook's reply from every rank's outcome (rank order)."""
    errors = [{"rank": r, **o["error"]} for r, o in enumerate(outcomes) if "error" in o]
    if any(o["status"] == "error" for o in outcomes):
        return {"op": "reply", "id": cell_id, "status": "error", "errors": errors}
    if errors:
        return {"op": "reply", "id": cell_id, "status": "interrupted", "errors": errors}
    return {"op": "reply", "id": cell_id, "status": "ok", "result": outcomes[0].get("result")}
