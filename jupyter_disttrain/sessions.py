"""Warm worker groups, notebook side: a session is a job whose ranks run cell after cell.

A :class:`Session` submits a job (the same :class:`~.spec.JobSpec`, backend,
monitor and job directory as any job, labelled ``source=session``) whose
payload carries the session's settings and a fresh token; its ranks run
:mod:`jupyter_disttrain.runtime.session` instead of one cell. Rank 0
announces its port with a ``session`` protocol line; the notebook reaches it
through :meth:`~.backends.base.Backend.connect` and sends each cell there
(see the runtime module for the frames: after the token's hello, every
message is signed with the job key of the payload the session made, and a
reply that fails verification is never unpickled). Each rank keeps its own globals
between cells; names a session cell bound are not shipped from the notebook
again, so a model built on the ranks stays the ranks' own.

Every cell gets its own :class:`~.job.Job` (a fresh monitor fed with the
session's events from the cell's start to every rank's ``cell`` end line),
so a dashboard shows that cell's metrics and output. When a rank dies, or
ranks do not come back within the grace period after an interrupt, the
session restarts its group and raises :class:`SessionLost`.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import select
import socket
import symtable
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import events as ev
from . import frameworks
from .backends import optional
from .backends.base import Backend, BackendError, JobRecord, Plan, Submission
from .job import Job
from .monitor import JobMonitor
from .payload import build_payload
from .results import decode_result, recreate_exception
from .runtime.framing import send_frame
from .runtime.session import (
    DEFAULT_GRACE,
    HELLO_LIMIT,
    recv_frame,
    recv_message,
    send_message,
)
from .spec import SOURCE_LABEL, JobSpec, SpecError

Listener = Callable[[ev.Event], None]
Runner = Callable[[Plan, Iterable[Listener]], Job]

SESSION_LABEL = (SOURCE_LABEL, "session")
#: What a session's payload runs before its first cell (nothing: cells come over the wire).
SESSION_SOURCE = "None  # a warm worker group: its cells arrive from the notebook\n"
#: Seconds to wait for rank 0's port (start-up: processes, rendezvous, imports).
START_TIMEOUT = 300.0
CONNECT_TIMEOUT = 30.0
#: Seconds to wait, after rank 0's reply, for every rank's output of the cell to arrive.
OUTPUT_WAIT = 3.0
#: Seconds, beyond the grace period, to wait for rank 0's answer to an interrupt.
INTERRUPT_SLACK = 10.0


class SessionError(RuntimeError):
    """A session cannot do what was asked; the message says why and what to do."""


class SessionLost(RuntimeError):
    """The session restarted its group (a rank died or stayed stuck): every rank's state is gone."""


def session_spec(spec: JobSpec) -> JobSpec:
    """``spec`` as a session's job; :class:`~.spec.SpecError` for what a session cannot run."""
    if not (frameworks.known(spec.framework) and frameworks.framework(spec.framework).sessions):
        titles = [f.title for n in frameworks.names() if (f := frameworks.framework(n)).sessions]
        raise SpecError(
            f"sessions run {' or '.join(titles)} ranks; --framework {spec.framework} runs as a "
            "job: use %%distrain without --session"
        )
    if spec.max_restarts:
        raise SpecError(
            "a session restarts its group itself when a rank dies: remove --max-restarts"
        )
    if spec.resume:
        raise SpecError(
            "--resume is for jobs; in a session, call load_checkpoint(URI) in a cell instead"
        )
    labels = tuple(item for item in spec.labels if item[0] != SESSION_LABEL[0])
    # ranks stay silent between cells by design: no hang reading from silence
    return spec.with_(labels=(*labels, SESSION_LABEL), hang_after=0.0)


def bound_names(source: str) -> set[str]:
    """Names the top level of ``source`` binds (assignments, imports, defs, classes)."""
    try:
        table = symtable.symtable(source, "<distrain-cell>", "exec")
    except SyntaxError:
        return set()
    return {
        s.get_name()
        for s in table.get_symbols()
        if s.is_assigned() or s.is_imported() or s.is_namespace()
    }


class _CellSubmission(Submission):
    """A session cell as its dashboard sees it: stop interrupts the cell."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ended = threading.Event()

    def stop(self, reason: str = "stopped by user") -> None:
        self.session.interrupt()

    def join(self, timeout: float | None = None) -> bool:
        return self.ended.wait(timeout)


class Session:
    """A live worker group driven cell by cell (see the module docstring).

    ``runner`` submits a plan the way the service does (so the session's job
    is one of this process's jobs). Thread-safe for one cell at a time.
    """

    def __init__(
        self,
        spec: JobSpec,
        backend: Backend,
        runner: Runner,
        *,
        idle_timeout: float | None = None,
        grace: float = DEFAULT_GRACE,
        listeners: Iterable[Listener] = (),
    ) -> None:
        if not optional.SESSIONS.has(backend):
            raise SessionError(str(optional.MissingFeature(backend.name, optional.SESSIONS)))
        if idle_timeout is not None and not idle_timeout > 0:
            raise SpecError(
                f"--idle-timeout must be a positive number of seconds, got {idle_timeout:g}"
            )
        self.spec = session_spec(spec)
        self.name = self.spec.name
        self.backend = backend
        self.idle_timeout = idle_timeout
        self.grace = grace
        self._runner = runner
        self._listeners = list(listeners)
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._token = ""
        self._key = b""  # the job key of the group's payload: signs and checks every message
        self._busy = threading.Lock()
        self.job: Job | None = None
        self.port: int | None = None
        self.cells = 0
        self.restarts = 0
        self.bound: set[str] = set()
        self._hellos: dict[int, ev.Event] = {}
        self._cell: tuple[int, Job] | None = None
        self._ended: set[int] = set()
        self._interrupted = False
        self.last_used = time.time()

    # ------------------------------------------------------------------ life

    def start(self, timeout: float = START_TIMEOUT) -> Session:
        """Submit the group and connect to its rank 0; returns once the ranks are up."""
        token = self._token = secrets.token_hex(16)
        settings = {"token": token, "idle_timeout": self.idle_timeout, "grace": self.grace}
        payload = build_payload(
            SESSION_SOURCE,
            {},
            job=self.name,
            framework=self.spec.framework,
            dist_backend=self.spec.dist_backend,
            extra={**self.backend.payload_extra(self.spec), "session": settings},
        )
        with self._cond:
            self.port = None
            self._hellos = {}
        self._key = payload.key
        plan = self.backend.plan(self.spec, payload)
        job = self._runner(plan, [self._on_event, *self._listeners])
        self.job = job
        try:
            self._sock = self._connect(self._wait_port(job, timeout), token)
        except BaseException:  # an interrupt, or rank 0 never listened: leave no process
            if not job.done:
                job.stop()
            raise
        self.last_used = time.time()
        return self

    def _wait_port(self, job: Job, timeout: float) -> int:
        """The port rank 0 announced (``session`` line); :class:`SessionError` if it did not."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.port is None and not job.done:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            port = self.port
        if port is None:
            why = job.reason or f"its rank 0 did not start within {timeout:g} s"
            raise SessionError(
                f"session {self.name} did not start: {why}; %distrain_logs {self.name} shows "
                "what the ranks printed"
            )
        return port

    def _record(self) -> JobRecord:
        return self.backend.job_record(self.spec, self.status())

    def _connect(self, port: int, token: str) -> socket.socket:
        try:
            sock = optional.SESSIONS.of(self.backend).connect(self._record(), port, CONNECT_TIMEOUT)
            sock.settimeout(CONNECT_TIMEOUT)
            send_frame(sock, json.dumps({"token": token, "v": 1}).encode())
            answer = json.loads(recv_frame(sock, HELLO_LIMIT))
        except (OSError, ConnectionError, ValueError, BackendError) as exc:
            raise SessionError(f"cannot connect to session {self.name}'s rank 0: {exc}") from None
        if not answer.get("ok"):
            sock.close()
            raise SessionError(f"session {self.name} refused the connection: {answer.get('error')}")
        sock.settimeout(None)
        return sock

    @property
    def alive(self) -> bool:
        """True while the group runs and the notebook is connected to it."""
        return self.job is not None and not self.job.done and self._sock is not None

    def status(self) -> str:
        """``busy`` (a cell runs), ``idle``, or the ended job's state."""
        if self.job is None:
            return "Pending"
        if self.job.done:
            return self.job.status()
        return "busy" if self._busy.locked() else "idle"

    def stop(self, timeout: float = 30.0, *, graceful: bool = True) -> str:
        """End the group: ask rank 0, then stop the job; no process is left. Returns the state.

        ``graceful`` False: stop the job at once (its ranks are stuck or gone).
        """
        sock, self._sock = self._sock, None
        if sock is not None and not graceful:
            sock.close()
        elif sock is not None:
            try:
                sock.settimeout(5.0)
                send_message(sock, {"op": "stop"}, self._key)
                recv_message(sock, self._key)
            except (OSError, ConnectionError, EOFError):
                pass
            finally:
                sock.close()
        job = self.job
        if job is None:
            return "Stopped"
        try:
            job.wait(5.0 if graceful else 0.0)
        except TimeoutError:
            pass
        if not job.done:
            job.stop(timeout=timeout)
        elif job.submission is not None:
            job.submission.join(timeout)
        if job.submission is not None:
            try:  # what the backend keeps of the ended group goes too (a cluster's job object)
                job.submission.remove()
            except BackendError:
                pass
        return job.status()

    def detach(self) -> None:
        """Let go of the group without ending it (it lives on where the backend keeps it
        beyond this kernel: it ends on ``stop`` from elsewhere, or its idle timeout)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        job = self.job
        if job is not None and job.submission is not None and not job.done:
            job.submission.detach()

    def restart(self, *, graceful: bool = True) -> Session:
        """Stop the group and start a new one (every rank's state is lost)."""
        self.stop(graceful=graceful)
        self.bound.clear()
        self.restarts += 1
        return self.start()

    # ------------------------------------------------------------------ events

    def _on_event(self, event: ev.Event) -> None:
        with self._cond:
            if event.kind == "session" and event.rank == 0:
                self.port = int(event.get("port", 0)) or None
                self._cond.notify_all()
            elif event.kind == "hello" and event.rank is not None:
                self._hellos[event.rank] = event
            elif event.kind == "job":
                self._cond.notify_all()
            cell = self._cell
            if event.kind == "cell" and cell is not None and event.get("id") == cell[0]:
                if event.get("phase") == "end" and event.rank is not None:
                    self._ended.add(event.rank)
                    self._cond.notify_all()
        if cell is not None and event.kind != "job":
            cell[1].feed(event)

    # ------------------------------------------------------------------ cells

    def interrupt(self) -> None:
        """Interrupt the running cell on every rank (no-op when none runs)."""
        sock, cell = self._sock, self._cell
        if sock is None or cell is None or self._interrupted:
            return
        self._interrupted = True
        try:
            send_message(sock, {"op": "interrupt", "id": cell[0]}, self._key)
        except OSError:
            pass

    def run(
        self,
        source: str,
        namespace: Mapping[str, Any] | None = None,
        *,
        max_capture_bytes: int | None = None,
        on_cell: Callable[[Job], None] | None = None,
        breakpoints: list[dict[str, Any]] | None = None,
    ) -> Any:
        """Run ``source`` on every rank; rank 0's last expression's value (``breakpoints``:
        the Debugger panel's in the cell, ``[{"line", "condition"}]`` of its body).

        Raises the first failing rank's exception (see
        :func:`~.results.recreate_exception`), ``KeyboardInterrupt`` when the
        cell was interrupted and every rank came back, :class:`SessionLost`
        when the group had to be restarted, :class:`SessionError` when the
        session is not running, :class:`~.payload.CaptureError` when the cell
        cannot be shipped. ``on_cell`` gets the cell's :class:`Job` first.
        """
        if not self._busy.acquire(blocking=False):
            raise SessionError(f"session {self.name} is running another cell; wait for it")
        try:
            return self._run(
                source, dict(namespace or {}), max_capture_bytes, on_cell, breakpoints or []
            )
        finally:
            self.last_used = time.time()
            self._busy.release()

    def _run(
        self,
        source: str,
        namespace: dict[str, Any],
        max_capture_bytes: int | None,
        on_cell: Callable[[Job], None] | None,
        breakpoints: list[dict[str, Any]],
    ) -> Any:
        job, sock = self.job, self._sock
        if job is None or sock is None or job.done:
            why = f" ({job.status()}: {job.reason})" if job is not None and job.done else ""
            raise SessionError(
                f"session {self.name} is not running{why}; start it again with "
                f"%distrain_session restart {self.name}"
            )
        shipped = {k: v for k, v in namespace.items() if k not in self.bound}
        extra: dict[str, Any] = {}
        if max_capture_bytes is not None:
            extra["max_capture_bytes"] = max_capture_bytes
        if breakpoints:
            extra["extra"] = {"breakpoints": breakpoints}
        payload = build_payload(
            source,
            shipped,
            job=self.name,
            framework=self.spec.framework,
            dist_backend=self.spec.dist_backend,
            **extra,
        )
        self.cells += 1
        cell_id = self.cells
        cell_job = self._cell_job(cell_id)
        if on_cell is not None:
            on_cell(cell_job)
        with self._cond:
            self._ended = set()
            self._interrupted = False
            self._cell = (cell_id, cell_job)
        try:
            interrupted = False
            try:
                send_message(sock, {"op": "run", "id": cell_id, "payload": payload.data}, self._key)
            except KeyboardInterrupt:  # the cell may have reached rank 0: stopped as in the wait
                self.interrupt()
                interrupted = True
            reply = self._wait_reply(sock, cell_id, interrupted)
        except BaseException:
            self._end_cell(cell_job, "Stopped", "interrupted", wait=False)
            raise
        self.bound |= bound_names(payload.source)
        return self._settle(reply, cell_job)

    def _cell_job(self, cell_id: int) -> Job:
        spec = self.spec
        monitor = JobMonitor(
            spec.name, self.backend.name, spec.world_size, nodes=spec.nodes, nproc=spec.nproc
        )
        now = time.time()
        with self._cond:  # the ranks' hellos, as of now: the cell's clock starts with it
            hellos = [dataclasses.replace(e, t=now) for e in self._hellos.values()]
        monitor.feed_many(hellos)
        monitor.feed(ev.job_event("Running", "Started", f"session {spec.name}, cell {cell_id}"))
        cell_job = Job(spec, self.backend, monitor)
        cell_job.submission = _CellSubmission(self)
        return cell_job

    def _wait_reply(
        self, sock: socket.socket, cell_id: int, interrupted: bool = False
    ) -> dict[str, Any] | None:
        """Rank 0's reply to cell ``cell_id``; None when the group died meanwhile, or did not
        answer within the grace after an interrupt (``interrupted``: one came while sending)."""
        deadline = time.monotonic() + self.grace + INTERRUPT_SLACK if interrupted else None
        while True:
            try:
                ready, _, _ = select.select([sock], [], [], 0.2)
                if not ready:
                    job = self.job
                    if job is not None and job.done:
                        return None
                    if deadline is not None and time.monotonic() > deadline:
                        return None
                    continue
                reply = recv_message(
                    sock, self._key
                )  # a whole frame, however long it takes to arrive
            except KeyboardInterrupt:
                self.interrupt()
                deadline = time.monotonic() + self.grace + INTERRUPT_SLACK
                continue
            except (OSError, ConnectionError, EOFError):
                return None
            if reply.get("op") == "reply" and reply.get("id") == cell_id:
                return reply

    def _reconnect(self) -> bool:
        """Connect to rank 0 again when the group still runs; False when it does not."""
        job, port = self.job, self.port
        if job is None or port is None or self._interrupted:
            return False
        if job.submission is not None:
            job.submission.join(1.0)  # a dying group has ended by now
        if job.done:
            return False
        old, self._sock = self._sock, None
        if old is not None:
            old.close()
        try:
            self._sock = self._connect(port, self._token)
        except SessionError:
            return False
        return True

    def _settle(self, reply: dict[str, Any] | None, cell_job: Job) -> Any:
        """The cell's value, or its exception, from rank 0's reply."""
        if reply is None and self._reconnect():
            self._end_cell(cell_job, "Failed", "connection to rank 0 lost", wait=False)
            raise SessionError(
                f"session {self.name}: the connection to rank 0 was lost while the cell ran; "
                "reconnected: the ranks keep their state, but this cell's value and error are "
                "lost (the cell may still be running there)"
            )
        if reply is None or reply.get("status") == "lost":
            job = self.job
            if reply is not None:
                ranks = ", ".join(map(str, reply.get("ranks", [])))
                why = (
                    f"rank(s) {ranks} did not come back within {self.grace:g} s of the "
                    "interrupt (stuck in a collective?)"
                )
            elif self._interrupted:
                why = "the ranks did not answer the interrupt"
            else:
                if job is not None and not job.done and job.submission is not None:
                    job.submission.join(5.0)
                reason = job.reason if job is not None and job.done else "the connection closed"
                why = f"a rank died ({reason})"
            self._end_cell(cell_job, "Failed", why, wait=False)
            try:
                self.restart(graceful=False)
                after = "the session restarted its group"
            except (SessionError, BackendError) as exc:
                after = f"restarting the group failed too ({exc})"
            raise SessionLost(
                f"session {self.name}: {why}; {after}: every rank's state was lost (variables, "
                "models, data): run the cells that build them again"
            )
        status = reply.get("status")
        if status == "ok":
            self._end_cell(cell_job, "Succeeded", "cell done")
            result = reply.get("result")
            return None if result is None else decode_result(result)
        errors = list(reply.get("errors") or [])
        if status == "interrupted":
            self._end_cell(cell_job, "Stopped", "interrupted on every rank")
            raise KeyboardInterrupt(
                f"session {self.name}: the cell was interrupted on every rank; the ranks keep "
                "their state"
            )
        now = time.time()
        for error in errors:  # the cell's job names the rank and shows its traceback
            rank = error.get("rank")
            if isinstance(rank, int):
                fields = {
                    k: error[k] for k in ("type", "module", "message", "traceback") if k in error
                }
                cell_job.feed(ev.Event("error", rank, now, fields))
        self._end_cell(cell_job, "Failed", f"rank {errors[0].get('rank')} raised")
        first = errors[0]
        error = recreate_exception(first, first.get("rank"))
        others = [str(e.get("rank")) for e in errors[1:]]
        if others:
            error.add_note(f"rank(s) {', '.join(others)} raised too; the session stays usable")
        raise error

    def _end_cell(
        self, cell_job: Job, state: ev.JobState, message: str, *, wait: bool = True
    ) -> None:
        """Wait for every rank's output of the cell (``cell`` end lines), then close its job."""
        world = self.spec.world_size
        if wait:
            job = self.job
            if job is not None and job.submission is not None:
                job.submission.wake()  # the ranks wrote their end lines before rank 0 replied
            deadline = time.monotonic() + OUTPUT_WAIT
            with self._cond:
                while len(self._ended) < world and time.monotonic() < deadline:
                    if self.job is not None and self.job.done:
                        break
                    self._cond.wait(deadline - time.monotonic())
        with self._cond:
            self._cell = None
        cell_job.feed(ev.job_event(state, state, message))
        submission = cell_job.submission
        if isinstance(submission, _CellSubmission):
            submission.ended.set()
