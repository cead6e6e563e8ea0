"""The kernel's debugger (ipykernel's DAP) seeing the ranks of this kernel's running jobs.

:class:`RankBridge` wraps the kernel debugger's ``process_request``: a request
whose thread, frame or variables id names a rank (:mod:`.ids`) is served over
that rank's signed channel (:mod:`.handlers`); every other request goes to
ipykernel as before, ``threads`` gaining one thread per rank ("rank R (node N)")
and ``debugInfo`` the paused ranks. ``dumpCell`` and ``setBreakpoints`` are
noted so a ``%%distrain`` cell's breakpoints travel with its job
(:meth:`RankBridge.breakpoints_for`). A :class:`~.watch.Watcher` turns ranks
pausing and resuming into ``stopped`` and ``continued`` events.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..backends import optional
from ..backends.base import BackendError
from ..debugging import DebugError
from . import cells, handlers, ids
from .ids import RankFrame
from .watch import Watcher

if TYPE_CHECKING:
    from ..job import Job

Request = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: Requests naming a rank by thread id, frame id or variables reference.
BY_THREAD: Final = ("stackTrace", "next", "stepIn", "stepOut", "continue", "pause")
BY_FRAME: Final = ("scopes", "evaluate")

log = logging.getLogger(__name__)


def response(
    request: dict[str, Any], body: dict[str, Any] | None, error: str = ""
) -> dict[str, Any]:
    """The DAP response to ``request``: ``body``, or failed with ``error``."""
    reply: dict[str, Any] = {
        "type": "response",
        "request_seq": request.get("seq", 0),
        "command": request.get("command"),
        "success": not error,
        "body": body or {},
    }
    if error:
        reply["message"] = error
    return reply


class RankBridge:
    """One kernel debugger's view of the ranks of ``jobs()`` (this kernel's jobs by name)."""

    def __init__(self, debugger: Any, jobs: Callable[[], dict[str, Job]]) -> None:
        self.debugger = debugger
        self.original: Request = debugger.process_request
        self.jobs = jobs
        self.lock = threading.Lock()
        self.slots: dict[str, int] = {}
        self.breakpoints: dict[str, list[dict[str, Any]]] = {}  # source path -> DAP breakpoints
        self.dumped: dict[str, str] = {}  # source path -> the cell's code
        self.job_cells: dict[str, tuple[str, str]] = {}  # job name -> (source path, code)
        self.versions: dict[str, int] = {}  # source path -> setBreakpoints seen for it
        self.delivered: dict[tuple[str, int], int] = {}  # (job, rank) -> version it has
        self.started: dict[str, int] = {}  # job -> version its payload carried
        self.bodies: dict[str, str] = {}  # job name -> its cell's body (matched to cells later)
        self.watcher = Watcher(self)

    def install(self) -> None:
        """Serve the kernel debugger's requests from now on."""
        self.debugger.process_request = self.process_request
        self.watcher.start()

    # -- jobs and ranks --------------------------------------------------------
    def live(self) -> list[tuple[int, Job]]:
        """``(slot, job)`` of this kernel's running jobs whose ranks can be reached."""
        found = []
        for name, job in list(self.jobs().items()):
            if job.done or not optional.RANKS.has(job.backend):
                continue
            with self.lock:
                if name not in self.slots and len(self.slots) < ids.MAX_SLOTS:
                    self.slots[name] = len(self.slots)
                slot = self.slots.get(name)
            if slot is not None and job.spec.world_size <= ids.MAX_RANKS:
                found.append((slot, job))
        return found

    def job_in(self, slot: int) -> Job:
        """The job of ``slot``; :class:`DebugError` when it ended."""
        for number, job in self.live():
            if number == slot:
                return job
        raise DebugError("that rank's job has ended")

    def threads(self) -> list[dict[str, Any]]:
        """One DAP thread per rank of each live job: ``rank R (node N)``."""
        listed = []
        for slot, job in self.live():
            nodes = {row.rank: row.node for row in job.monitor.ranks()}
            for rank in range(job.spec.world_size):
                node = nodes.get(rank, rank // job.spec.nproc)
                listed.append(
                    {"id": ids.thread_id(slot, rank), "name": f"rank {rank} (node {node})"}
                )
        return listed

    def focus(self, name: str, rank: int) -> None:
        """Show paused ``rank`` of job ``name`` in the panel (its frames, its variables, its
        steps); :class:`DebugError` when it is not paused or the job is not this kernel's."""
        with self.lock:
            slot = self.slots.get(name)
        stopped = self.watcher.stopped_threads()
        thread = ids.thread_id(slot, rank) if slot is not None and 0 <= rank < ids.MAX_RANKS else 0
        if thread not in stopped:
            ranks = sorted(w.rank for t in stopped if (w := ids.of_thread(t)) and w.slot == slot)
            raise DebugError(
                f"rank {rank} of job {name} is not stopped in the Debugger panel (stopped: "
                f"{', '.join(map(str, ranks)) or 'none'}); turn the kernel's debugger on and "
                "set a breakpoint in the cell's gutter"
            )
        self.watcher.focus(thread)

    # -- breakpoints -----------------------------------------------------------
    def breakpoints_for(self, name: str, body: str, raw: str = "") -> list[dict[str, Any]]:
        """The workers' breakpoints for job ``name`` running the ``%%distrain`` cell ``body``
        (``raw``: the whole cell as typed, when known); notes which cell the job shows."""
        with self.lock:
            self.bodies[name] = body
            known = dict(self.dumped)
            known.update({path: _read(path) for path in self.breakpoints if path not in known})
            path = next((p for p, code in known.items() if cells.same_cell(code, body)), None)
            if path is None and cells.same_cell(raw, body):
                path = _cell_path(raw)
                known[path] = raw
            if path is None:
                return []
            self.job_cells[name] = (path, known[path])
            self.delivered = {k: v for k, v in self.delivered.items() if k[0] != name}
            self.started[name] = self.versions.get(path, 0)  # what every rank starts with
            return cells.worker_breakpoints(known[path], self.breakpoints.get(path, []))

    def _note(self, message: dict[str, Any], reply: dict[str, Any]) -> None:
        args = message.get("arguments") or {}
        command = message.get("command")
        with self.lock:
            if command == "dumpCell" and reply.get("success"):
                self.dumped[str(reply["body"]["sourcePath"])] = str(args.get("code", ""))
            elif command == "setBreakpoints":
                path = str((args.get("source") or {}).get("path", ""))
                self.breakpoints[path] = list(args.get("breakpoints") or [])
                self.versions[path] = self.versions.get(path, 0) + 1

    def sync_paused(self) -> None:
        """Give every paused rank the panel's breakpoints now (a rank that resumed meanwhile
        gets them at its next stop)."""
        ranks = [(job, p.rank) for _, job in self.live() for p in job.paused()]
        if ranks:
            with ThreadPoolExecutor(max_workers=min(16, len(ranks))) as pool:
                for future in [pool.submit(self.sync, job, rank) for job, rank in ranks]:
                    try:
                        future.result()
                    except DebugError as exc:
                        log.warning("breakpoints not given: %s", exc)

    def sync_running(self, path: str) -> None:
        """Give the running ranks of each live job running cell ``path`` the panel's
        breakpoints of it now (a signed request: they take them at their next line)."""
        for _, job in self.live():
            with self.lock:
                cell = self.job_cells.get(job.name)
                code = self.dumped.get(path) or _read(path)
                if cell is None and cells.same_cell(code, self.bodies.get(job.name, "\0")):
                    cell = self.job_cells[job.name] = (path, code)
                if cell is None or cell[0] != path:
                    continue
                spots = cells.worker_breakpoints(cell[1], self.breakpoints.get(path, []))
            if len(job.paused()) < job.spec.world_size:
                try:
                    job.set_breakpoints(spots)
                except BackendError as exc:
                    log.warning("breakpoints not sent to job %s: %s", job.name, exc)

    def sync(self, job: Job, rank: int) -> None:
        """Give a paused ``rank`` the panel's breakpoints of its cell, if it has older ones
        (set while the job ran); a running rank gets them at its next stop."""
        with self.lock:
            cell = self.job_cells.get(job.name)
            if cell is None:
                return
            path, code = cell
            version = self.versions.get(path, 0)
            have = self.delivered.get((job.name, rank), self.started.get(job.name, 0))
            spots = cells.worker_breakpoints(code, self.breakpoints.get(path, []))
        if have == version:
            return
        stopped = next((p.file for p in job.paused() if p.rank == rank), "")
        file = stopped if cells.is_cell_file(stopped) else handlers.CELL_FILE  # a session's cell N
        job.debug(rank).inspect("breaks", file=file, spots=spots)
        with self.lock:
            self.delivered[(job.name, rank)] = version

    def sync_later(self, job: Job, rank: int) -> None:
        """:meth:`sync` off this thread (it talks to the rank)."""
        handlers.background(lambda: self.sync(job, rank), f"rank {rank} breakpoints")

    # -- requests --------------------------------------------------------------
    def target(self, message: dict[str, Any]) -> RankFrame | None:
        """The rank (and frame) a request names; None when it is the kernel's own."""
        command = message.get("command")
        args = message.get("arguments") or {}
        if command in BY_THREAD:
            return ids.of_thread(args.get("threadId"))
        if command in BY_FRAME:
            return ids.of_frame(args.get("frameId"))
        if command == "variables":
            return ids.of_variables(args.get("variablesReference"))
        return None

    def continues_ranks(self, message: dict[str, Any]) -> bool:
        """A ``continue`` for the kernel's own thread while only ranks are stopped: JupyterLab
        sends that for its last stopped thread (it forgets the thread before naming it)."""
        return (
            message.get("command") == "continue"
            and not getattr(self.debugger, "stopped_threads", None)
            and bool(self.watcher.stopped_threads())
        )

    def first_paused(self) -> RankFrame | None:
        """The first stopped rank thread, as a request target."""
        stopped = self.watcher.stopped_threads()
        return ids.of_thread(stopped[0]) if stopped else None

    async def process_request(self, message: dict[str, Any]) -> dict[str, Any]:
        """ipykernel's ``process_request``, with the ranks added (see the module docstring)."""
        where = self.target(message)
        if where is None and self.continues_ranks(message):
            where = self.first_paused()
        if where is not None:
            return await asyncio.to_thread(self.serve, message, where)
        reply = await self.original(message)
        command = message.get("command")
        if command in ("dumpCell", "setBreakpoints"):
            self._note(message, reply)
        if command == "setBreakpoints":  # the reply comes once paused ranks have them
            await asyncio.to_thread(self.sync_paused)
            path = str(((message.get("arguments") or {}).get("source") or {}).get("path", ""))
            await asyncio.to_thread(self.sync_running, path)
        elif command == "threads" and reply.get("success"):
            reply["body"]["threads"] = [*reply["body"].get("threads", []), *self.threads()]
        elif command == "debugInfo" and reply.get("success"):
            stopped = reply["body"].setdefault("stoppedThreads", [])
            stopped.extend(self.watcher.stopped_threads())
        return reply

    def serve(self, message: dict[str, Any], where: RankFrame) -> dict[str, Any]:
        """A request addressed to a rank (blocking: runs off the control loop)."""
        command = str(message.get("command"))
        args = message.get("arguments") or {}
        try:
            job = self.job_in(where.slot)
            if command == "stackTrace":
                stop = self.watcher.stops(ids.thread_id(where.slot, where.rank))
                body = handlers.stack_trace(job, where, args, self.job_cells.get(job.name), stop)
            elif command == "scopes":
                body = handlers.scopes(where)
            elif command == "variables":
                body = handlers.variables(job, where)
            elif command == "evaluate":
                body = handlers.evaluate(job, where, args)
            elif command in handlers.STEPS:
                thread = ids.thread_id(where.slot, where.rank)
                body = handlers.step(job, where, command, lambda: self.watcher.stepping(thread))
            elif command == "continue":
                body = handlers.resume(job, where, args)
            else:  # pause
                body = handlers.pause(job, where)
        except DebugError as exc:
            return response(message, None, str(exc))
        return response(message, body)


def _read(path: str) -> str:
    """The code ipykernel dumped at ``path`` (empty when it is gone)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def _cell_path(raw: str) -> str:
    """The source path ipykernel gives the cell ``raw`` (its hash-named file)."""
    from ipykernel.compiler import get_file_name

    return str(get_file_name(raw))  # type: ignore[no-untyped-call]
