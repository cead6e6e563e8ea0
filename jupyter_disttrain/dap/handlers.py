"""The Debugger panel's requests addressed to a rank, answered over its signed channel.

Each handler takes the job, the rank (and frame) the request's id names
(:mod:`.ids`) and the DAP arguments, and returns the response ``body``; a
:class:`~jupyter_disttrain.debugging.DebugError` (the rank runs, is gone, or
refused) becomes a failed response naming why. They block on the network,
so the bridge runs them off the kernel's control loop.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..backends.base import BackendError
from ..debugging import DebugError
from . import cells, ids
from .ids import RankFrame

if TYPE_CHECKING:
    from ..job import Job

CELL_FILE: Final = "<distrain-cell>"
#: pdb's command for each stepping request.
STEPS: Final = {"next": "n", "stepIn": "s", "stepOut": "r"}
#: Seconds a step may take before its answer says the rank runs (its stop comes later).
STEP_WAIT: Final = 30.0

log = logging.getLogger(__name__)


def source_of(file: str, line: int, cell: tuple[str, str] | None) -> tuple[dict[str, Any], int]:
    """The DAP ``source`` and line of a rank's ``file:line``: the running cell's lines are
    shown in the notebook's cell (``cell`` is its source path and code, when the panel dumped
    it; None for a frame of another cell)."""
    if cells.is_cell_file(file) and cell is not None:
        path, code = cell
        return {"name": os.path.basename(path), "path": path}, cells.to_cell(code, line)
    if file.startswith("<"):
        return {"name": file}, line
    return {"name": os.path.basename(file), "path": file}, line


def stack_trace(
    job: Job, where: RankFrame, args: dict[str, Any], cell: tuple[str, str] | None, stop: int
) -> dict[str, Any]:
    """The rank's user frames at its ``stop``, innermost first (``startFrame``, ``levels``
    honoured)."""
    answer = job.debug(where.rank).inspect("stack")
    listed = [f for f in answer.get("frames") or [] if f["index"] < ids.MAX_FRAMES]
    start = int(args.get("startFrame") or 0)
    levels = int(args.get("levels") or 0)
    shown = listed[start : start + levels] if levels > 0 else listed[start:]
    frames = []
    running = cells.newest_cell_file([str(f["file"]) for f in listed])
    for frame in shown:
        file = str(frame["file"])
        source, line = source_of(file, int(frame["line"]), cell if file == running else None)
        frames.append(
            {
                "id": ids.frame_id(where.slot, where.rank, frame["index"], stop),
                "name": frame["function"],
                "line": line,
                "column": 1,
                "source": source,
            }
        )
    return {"stackFrames": frames, "totalFrames": len(listed)}


def scopes(where: RankFrame) -> dict[str, Any]:
    """A rank frame's two scopes (their variables come with ``variables``)."""
    return {
        "scopes": [
            {
                "name": name.capitalize(),
                "expensive": False,
                "variablesReference": ids.variables_id(
                    where.slot, where.rank, where.frame, name, where.stop
                ),
            }
            for name in ids.SCOPES
        ]
    }


def variables(job: Job, where: RankFrame) -> dict[str, Any]:
    """The scope's variables, bounded (a last row counts those left out)."""
    answer = job.debug(where.rank).inspect("vars", frame=where.frame, scope=where.scope)
    if answer.get("error"):
        raise DebugError(f"rank {where.rank}: {answer['error']}")
    shown = [
        {"name": v["name"], "value": v["value"], "type": v["type"], "variablesReference": 0}
        for v in answer.get("variables") or []
    ]
    more = int(answer.get("more") or 0)
    if more:
        shown.append({"name": "...", "value": f"{more} more not shown", "variablesReference": 0})
    return {"variables": shown}


def evaluate(job: Job, where: RankFrame, args: dict[str, Any]) -> dict[str, Any]:
    """``expression`` in the rank's frame; its error fails the request."""
    expression = args.get("expression")
    if not isinstance(expression, str):
        raise DebugError("evaluate needs an expression")
    answer = job.debug(where.rank).inspect("eval", frame=where.frame, expr=expression)
    if answer.get("error"):
        raise DebugError(str(answer["error"]))
    return {
        "result": answer.get("result", ""),
        "type": answer.get("type", ""),
        "variablesReference": 0,
    }


def step(job: Job, where: RankFrame, command: str, moved: Callable[[], None]) -> dict[str, Any]:
    """Start pdb's step on the rank (``moved`` is called once it is sent); its stop comes as
    a ``stopped`` event. The answer is not awaited here: a step over a collective waits for
    the other ranks."""
    debugger = job.debug(where.rank)
    debugger.where()  # DebugError now when the rank is not paused
    moved()
    background(lambda: debugger.ask(STEPS[command], STEP_WAIT), f"rank {where.rank} {command}")
    return {}


def resume(job: Job, where: RankFrame, args: dict[str, Any]) -> dict[str, Any]:
    """pdb's ``c`` on the rank (``singleThread``), else on every paused rank of its job."""
    single = bool(args.get("singleThread"))
    ranks = [where.rank] if single else [p.rank for p in job.paused()]
    if single:
        job.debug(where.rank).where()
    for rank in ranks:
        debugger = job.debug(rank)
        background(debugger.cont, f"rank {rank} continue")
    return {"allThreadsContinued": not single}


def pause(job: Job, where: RankFrame) -> dict[str, Any]:
    """Ask the running rank to pause at its next line of the cell; its stop comes as a
    ``stopped`` event (reason ``pause``)."""
    if any(p.rank == where.rank for p in job.paused()):
        return {}
    try:
        job.pause([where.rank], timeout=0)
    except BackendError as exc:
        raise DebugError(str(exc)) from None
    return {}


def background(work: Callable[[], Any], what: str) -> None:
    """Run ``work`` on its own thread; a :class:`DebugError` it raises is logged."""

    def run() -> None:
        try:
            work()
        except DebugError as exc:  # the rank ended or resumed meanwhile: its events say so
            log.warning("%s: %s", what, exc)

    threading.Thread(target=run, name=f"distrain-dap {what}", daemon=True).start()
