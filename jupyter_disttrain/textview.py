"""Text views of a job: a live display for notebooks, streamed lines for terminals.

Both render what the job's :class:`~jupyter_disttrain.monitor.JobMonitor`
holds and refresh at most :data:`MAX_UPDATES_PER_SECOND` times a second,
whatever the event rate. The live display is an IPython display handle, so
updates land in the cell that started the job even while other cells run.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import events as ev
from .backends.base import JobRecord, RuntimeRecord
from .terminal import redraws, shown
from .units import duration

if TYPE_CHECKING:
    from .job import Job

MAX_UPDATES_PER_SECOND = 10
LINES_METRIC_EVERY = 10  # in "lines" mode, print rank 0's metrics every N steps


class _Text:
    """A display object whose repr is the given text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


class LiveView:
    """Follows one job and renders it in ``mode``.

    Modes: ``widget`` (the :class:`~jupyter_disttrain.widgets.Dashboard`;
    ``blocking`` says the cell waits for the job), ``text`` (a display
    refreshed in place), ``lines`` (rank-prefixed log lines, periodic
    metrics and state changes, printed as they come), ``none``. Events come
    from a backend thread through :meth:`on_event`.
    """

    def __init__(self, mode: str = "text", *, blocking: bool = False) -> None:
        if mode not in ("widget", "text", "lines", "none"):
            raise ValueError(f"unknown live mode {mode!r}")
        self.mode = mode
        self.blocking = blocking
        self._dashboard: Any = None
        self.job: Job | None = None
        self._dirty = threading.Event()
        self._closed = threading.Event()
        self._handle: Any = None
        self._thread: threading.Thread | None = None
        self._pending: list[ev.Event] = []
        self._tenth: int | None = None  # lines mode: the tenth of the progress last printed
        self._redraws: dict[int | None, ev.Event] = {}  # lines mode: see settle_redraws
        self._lock = threading.Lock()

    def attach(self, job: Job) -> None:
        """Start rendering ``job`` (call right after submitting it)."""
        self.job = job
        if self.mode == "none":
            return
        if self.mode == "widget":
            from .widgets import Dashboard

            self._dashboard = Dashboard.for_job(job, blocking=self.blocking)
            self._dashboard.show()
            return
        if self.mode == "text":
            from IPython.display import display

            self._handle = display(_Text(self.render()), display_id=True)
        self._thread = threading.Thread(target=self._loop, name="distrain-view", daemon=True)
        self._thread.start()

    def on_event(self, event: ev.Event) -> None:
        """Note an event (cheap; rendering happens on the view's own schedule)."""
        if self.mode == "widget":
            return  # the dashboard polls the monitor's version
        if self.mode == "lines":
            with self._lock:
                self._pending.append(event)
        self._dirty.set()

    def close(self) -> None:
        """Render the final state once more and stop refreshing."""
        if self._dashboard is not None:
            self._dashboard.close()
            return
        if self._thread is None:
            return
        self._closed.set()
        self._dirty.set()
        self._thread.join(5)
        self._thread = None

    def cell_value(self, job: Job, shell: Any) -> Job | None:
        """What a cell that started ``job`` returns: ``None`` when this view shows the job.

        A live view already shows the job as it goes, so the handle is not
        echoed as ``Out[n]`` (its text would be the state at launch, stale
        once the job moves on); it is kept as ``_`` and ``Out[n]`` as if it had
        been. With nothing shown (mode ``none``, or no shell) it is returned.
        """
        if self.mode == "none" or shell is None:
            return job
        shell.displayhook.update_user_ns(job)
        return None

    def render(self) -> str:
        """The current text of the live display."""
        assert self.job is not None
        from .monitor import format_text

        return format_text(self.job.monitor.snapshot())

    def _loop(self) -> None:
        interval = 1.0 / MAX_UPDATES_PER_SECOND
        while True:
            self._dirty.wait()
            self._dirty.clear()
            self._safe_refresh()
            if self._closed.is_set():  # the cell returns after this: its job's end event,
                return  # which the backends send after its last lines, is shown already
            if self.job is not None and self.job.done:
                self._closed.wait(interval)  # let the last events of a finished job arrive
                self._safe_refresh()
                return
            self._closed.wait(interval)  # the rate's pause; a close ends it

    def _safe_refresh(self) -> None:
        """:meth:`_refresh`; a failure is reported once per refresh and the view goes on."""
        try:
            self._refresh()
        except Exception as exc:  # the view must outlive anything a job's lines contain
            print(
                f"distrain: cannot show an update ({type(exc).__name__}: {exc})",
                file=sys.stderr,
                flush=True,
            )

    def _refresh(self) -> None:
        if self.mode == "text" and self._handle is not None:
            self._handle.update(_Text(self.render()))
        elif self.mode == "lines":
            with self._lock:
                pending, self._pending = self._pending, []
            why = self.job.reason if self.job is not None else None
            settled = settle_redraws(pending, self._redraws)
            out = [line for e in settled if (line := _format_safely(e, why)) is not None]
            out.extend(self._progress_line(pending))
            if out:
                sys.stdout.write("\n".join(out) + "\n")
                sys.stdout.flush()

    def _progress_line(self, pending: list[ev.Event]) -> list[str]:
        """``progress: 40 of 100 steps (40%), ...`` each time rank 0 passes another tenth."""
        if self.job is None or not any(e.kind == "progress" for e in pending):
            return []
        from .monitor.text import progress_text

        p = self.job.monitor.snapshot()["progress"]
        if p is None or int(10 * p["fraction"]) == self._tenth:
            return []
        tenth = int(10 * p["fraction"])
        self._tenth = tenth
        return [f"progress: {progress_text(p)}"]


def settle_redraws(pending: list[ev.Event], held: dict[int | None, ev.Event]) -> list[ev.Event]:
    """``pending`` as a terminal leaves it printed: a rank's line that redraws the one
    before it (starts with ``\\r``: a progress bar) waits in ``held`` until that rank
    prints another line or the job ends, and only the last one held is printed then."""
    out: list[ev.Event] = []
    for event in pending:
        if event.kind == "log" and not event.get("source"):
            if redraws(str(event.get("text") or "")):
                held[event.rank] = event
                continue
            if (redrawn := held.pop(event.rank, None)) is not None:
                out.append(redrawn)
        elif event.kind == "job" and event.get("state") in ev.TERMINAL_STATES:
            out.extend(held.values())
            held.clear()
        out.append(event)
    return out


def _format_safely(event: ev.Event, reason: str | None = None) -> str | None:
    try:
        return format_event(event, reason)
    except Exception as exc:
        return f"[rank {event.rank}] ({event.kind} line not shown: {type(exc).__name__}: {exc})"


def _number(value: object) -> str:
    """A metric value as printed: numbers to 4 significant digits, anything else as given."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.4g}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def format_event(event: ev.Event, reason: str | None = None) -> str | None:
    """One printed line for an event in ``lines`` mode, or None to skip it.

    ``reason``: the job's own reading of why it ended (:attr:`Job.reason`), which a
    terminal ``job`` event shows instead of the backend's message.

    Never raises for an event's field values (a metric that is not a number is
    printed as it came).
    """
    if event.kind == "log":
        source = event.get("source")
        if source:  # agent chatter stays in the logs; a job-wide warning is shown
            text = str(event.get("text") or "")
            return text if text.startswith("warning: ") else None
        return f"[rank {event.rank}] {shown(str(event.get('text')))}"
    if event.kind == "metric":
        step = event.get("step", 0)
        if event.rank != 0 or (isinstance(step, int) and step % LINES_METRIC_EVERY):
            return None
        given = event.get("values", {})
        items = given.items() if isinstance(given, dict) else [("values", given)]
        values = " ".join(f"{k}={_number(v)}" for k, v in items)
        return f"[rank 0] step {step}: {values}"
    if event.kind == "job":
        message = event.get("message")
        if reason and event.get("state") in ev.TERMINAL_STATES:
            message = reason
        return f"job {event.get('state')}" + (f": {message}" if message else "")
    if event.kind == "phase" and event.get("state") == "waiting" and event.get("message"):
        return f"waiting ({event.get('phase')}): {event.get('message')}"
    if event.kind == "restart":
        return f"workers restarted (attempt {event.get('attempt')})"
    if event.kind == "error":
        return f"[rank {event.rank}] {event.get('type')}: {event.get('message')}"
    return None


def _when(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def format_job_table(
    records: Iterable[JobRecord],
    mine: set[str],
    diagnoses: Mapping[tuple[str, str], str | None] | None = None,
) -> str:
    """A plain-text table of jobs; ``mine`` marks this kernel's.

    Each job's diagnosis (by ``(backend, name)``) follows the table, one line
    per job, as the dashboard and the sidebar show it.
    """
    rows = [("NAME", "BACKEND", "STATE", "RANKS", "STARTED", "ENDED", "KERNEL", "NOTE")]
    notes: list[str] = []
    for r in records:
        rows.append(
            (
                r.name,
                r.backend,
                r.state,
                f"{r.nodes}x{r.nproc}",
                _when(r.created),
                _when(r.ended),
                "this" if r.name in mine else "",
                r.reason[:60],
            )
        )
        diagnosis = (diagnoses or {}).get((r.backend, r.name))
        if diagnosis:
            notes.append(f"{r.name}: {diagnosis}")
    if len(rows) == 1:
        return "no jobs"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(table + notes)


def _age(created: float) -> str:
    seconds = max(0, int(time.time() - created)) if created else None
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_namespace_table(records: Iterable[JobRecord]) -> str:
    """Every job of a namespace (``--all``): kind, state, the progress it reports, age,
    nodes, and who started it (``jupyter-disttrain`` for this tool's)."""
    rows = [("NAME", "KIND", "STATE", "PROGRESS", "AGE", "NODES", "STARTED BY")]
    for r in records:
        facts = r.facts
        progress = "-" if facts.progress is None else f"{facts.progress}%"
        if facts.eta is not None and facts.eta > 0 and r.state == "Running":
            progress += f" ({duration(float(facts.eta))} left)"
        started = "" if facts.foreign else "jupyter-disttrain"
        rows.append(
            (
                r.name,
                facts.workload or r.backend,
                r.state,
                progress,
                _age(r.created),
                str(r.nodes),
                started or facts.started_by or "-",
            )
        )
    if len(rows) == 1:
        return "no jobs in this namespace"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def format_runtime_table(runtimes: Iterable[RuntimeRecord]) -> str:
    """A plain-text table of training runtimes (name, scope, framework, image, nodes)."""
    rows = [("NAME", "SCOPE", "FRAMEWORK", "NODES", "IMAGE")]
    for r in runtimes:
        rows.append(
            (
                r.name,
                r.scope,
                r.framework or "-",
                "-" if r.nodes is None else str(r.nodes),
                r.image or "-",
            )
        )
    if len(rows) == 1:
        return "no training runtimes (no configured cluster serves Kubeflow Trainer)"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
