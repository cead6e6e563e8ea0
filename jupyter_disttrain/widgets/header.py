"""The dashboard's header: job name, backend, state, elapsed, world size, rate, Stop, Where.

DOM contract: ``.distrain-header`` with ``data-job`` and ``data-state``; its
fields are ``span[data-field=...]``; the start-up timeline ``.distrain-phases`` (a
``span.distrain-phase`` per phase, ``data-state`` ``done``, ``current``, ``pending`` or
``unfinished``: the job ended in it)
and what the current phase waits for ``.distrain-waiting``; the job's diagnosis is
``.distrain-diagnosis``, ``--data`` staging progress ``.distrain-staging``, warnings
(package versions that differ from the notebook's, ...) ``.distrain-warning``; the Stop
button has class ``distrain-stop``, the Where button ``distrain-where`` and the stacks it
shows ``.distrain-where-out``. With a known total, ``.distrain-progress`` (``data-step``,
``data-total``, ``data-fraction``, ``data-eta``: seconds, "" while unknown) is the progress
bar, its text ``.distrain-progress-text``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import ipywidgets as w

from ..events import ENDED_STATES, RAISED
from ..monitor import ProgressRow, Snapshot, Where, user_traceback, waiting_line
from ..monitor.phases import phase_text
from ..monitor.text import progress_text, shown_diagnosis, staging_lines
from .text import duration, esc, rate, state_class

__all__ = ["BLOCKING_NOTE", "HeaderPanel", "header_html", "progress_html", "where_html"]

#: Shown while a ``--wait`` cell blocks the kernel (button clicks wait for the kernel).
BLOCKING_NOTE = (
    "This cell waits for the job (--wait): the kernel answers no button until it returns. "
    "To stop the job, interrupt the kernel (the stop button of the notebook, or Ctrl-C)."
)


def header_html(snap: Snapshot, *, note: str = "") -> str:
    """The header line for ``snap``, with an optional note under it."""
    backend = snap["backend"] + (f" · {snap['dist_backend']}" if snap["dist_backend"] else "")
    fields = [
        f'<span class="distrain-job-name" data-field="name">{esc(snap["name"])}</span>',
        f'<span class="distrain-badge {state_class(snap["state"])}" data-field="state">'
        f"{esc(snap['state'])}</span>",
        f'<span data-field="backend">{esc(backend)}</span>',
        f'<span data-field="elapsed">{duration(snap["elapsed"])}</span>',
        f'<span data-field="world">{snap["world_size"]} ranks '
        f"({snap['nodes']} node{'s' if snap['nodes'] != 1 else ''} x {snap['nproc']})</span>",
    ]
    if snap["step"] is not None:
        fields.append(f'<span data-field="step">step {snap["step"]}</span>')
    if snap["stalled"]:
        fields.append('<span data-field="rate" data-stalled="true">stalled</span>')
    else:
        fields.append(f'<span data-field="rate">{rate(snap["steps_per_s"])} steps/s</span>')
    if snap["restarts"]:
        n = snap["restarts"]
        fields.append(f'<span data-field="restarts">{n} restart{"s" if n != 1 else ""}</span>')
    lines = [
        f'<div class="distrain-header" data-job="{esc(snap["name"])}" '
        f'data-state="{esc(snap["state"])}">{"".join(fields)}</div>'
    ]
    lines.extend(phases_html(snap))
    if snap.get("progress") is not None:
        lines.append(progress_html(snap["progress"]))
    why = snap["why"]
    if why and snap["state"] in ("Failed", "Restarting", RAISED):
        lines.append(f'<div class="distrain-reason" data-field="cause">{esc(why)}</div>')
        lines.extend(_cause_traceback(snap))
    elif why and snap["state"] == "Stopped":
        lines.append(f'<div class="distrain-note" data-field="cause">{esc(why)}</div>')
    said = []  # where paused ranks stopped (not ``note``: the caller's note is said below, once)
    for row in snap["ranks"] if snap["state"] == "Paused" else []:  # stopped in the debugger
        if row["state"] == "Paused":
            said.append(row["reason"])
            paused = esc(row["reason"])
            lines.append(f'<div class="distrain-note" data-field="paused">{paused}</div>')
    if snap["recovered"]:
        lines.append(
            f'<div class="distrain-note" data-field="recovered">{esc(snap["recovered"])}</div>'
        )
    for line in staging_lines(snap.get("staging", [])):
        lines.append(f'<div class="distrain-staging">{esc(line)}</div>')
    for warning in snap.get("warnings", []):
        lines.append(f'<div class="distrain-warning">warning: {esc(warning)}</div>')
    diagnosis = shown_diagnosis(snap)
    if diagnosis and diagnosis not in said:  # a pause's diagnosis is its note above
        lines.append(f'<div class="distrain-diagnosis">{esc(diagnosis)}</div>')
    if note:
        lines.append(f'<div class="distrain-note">{esc(note)}</div>')
    return "".join(lines)


def _cause_traceback(snap: Snapshot) -> list[str]:
    """The failing rank's traceback from the cell on, pinned under the cause (open)."""
    cause = snap["cause"]
    if snap["state"] not in ("Failed", RAISED) or cause is None:
        return []
    own = [e for e in snap["errors"] if e["rank"] == cause["rank"] and e["traceback"]]
    if not own:
        return []
    trace = user_traceback(own[0]["traceback"])
    return [
        f'<details class="distrain-cause-traceback" data-rank="{cause["rank"]}" open>'
        f"<summary>rank {cause['rank']}'s traceback</summary><pre>{esc(trace)}</pre></details>"
    ]


def phases_html(snap: Snapshot) -> list[str]:
    """The start-up timeline (``.distrain-phases``), the current phase highlighted while it
    lasts, and what the job waits for in it (``.distrain-waiting``)."""
    rows = snap.get("phases") or []
    if not rows:
        return []
    current = snap.get("phase")
    spans = []
    for row in rows:
        state = "current" if row["name"] == current else row["state"]
        if state == "active":  # the job ended in it
            state = "unfinished"
        spans.append(
            f'<span class="distrain-phase" data-phase="{row["name"]}" '
            f'data-state="{state}">{esc(phase_text(row))}</span>'
        )
    first = snap.get("first_step_s")
    total = ""
    if first is not None:
        total = f' <span class="distrain-first-step">({duration(first)} to first step)</span>'

    out = [
        f'<div class="distrain-phases" data-phase="{current or ""}">'
        f"{' · '.join(spans)}{total}</div>"
    ]
    waiting = waiting_line(rows, current)
    if waiting:
        out.append(f'<div class="distrain-waiting">{esc(waiting)}</div>')
    return out


def progress_html(p: ProgressRow | None) -> str:
    """The progress bar with its text (steps, rate, ETA); "" without a known total."""
    if p is None:
        return ""
    width = f"{100 * min(1.0, max(0.0, p['fraction'])):.1f}%"
    eta = "" if p["eta_s"] is None else f"{p['eta_s']:.0f}"
    return (
        f'<div class="distrain-progress" data-step="{p["step"]}" data-total="{p["total"]}" '
        f'data-fraction="{p["fraction"]:.4f}" data-eta="{eta}" style="position:relative">'
        f'<div class="distrain-progress-bar" style="width:{width}"></div>'
        f'<span class="distrain-progress-text">{esc(progress_text(p))}</span></div>'
    )


def where_html(where: Where) -> str:
    """The ranks' stacks: the user's frames with source, every frame behind a fold."""
    return (
        f'<pre class="distrain-where-text">{esc(where.text())}</pre>'
        '<details class="distrain-where-all"><summary>every frame (runtime and libraries)'
        f"</summary><pre>{esc(where.text(library=True))}</pre></details>"
    )


class HeaderPanel:
    """Header line plus the Stop and Where buttons.

    ``stop`` is called once, on the kernel thread, when the button is
    clicked; it must return promptly (``job.stop(wait=False)``). The button
    is disabled without a ``stop`` callable and hidden while the job reads as
    ended (shown again if it goes on: a restart after a rank's failure).
    A ``blocking`` dashboard (``--wait``) shows no Stop nor Where: the busy kernel
    would handle their clicks only after the job; its note says how to stop it.
    The buttons sit in a column of their own (``.distrain-actions``) that the
    header's text wraps beside, never over.
    ``where`` returns the ranks' stacks (it may take seconds: it runs on a
    thread of its own): the user's frames are shown, every frame behind a fold
    (``details.distrain-where-all``); the Where button is hidden without it.
    Once the job ended, stacks still shown are marked stale (``data-stale``).
    """

    def __init__(
        self,
        stop: Callable[[], object] | None,
        *,
        blocking: bool = False,
        where: Callable[[], Where] | None = None,
    ) -> None:
        self._stop = stop
        self._where = where
        self.blocking = blocking
        self._stopping = False
        self._error = ""
        self._lock = threading.Lock()
        self.html = w.HTML()
        self.button = w.Button(
            description="Stop",
            icon="stop",
            button_style="danger",
            disabled=stop is None,
            tooltip="Stop the job: every process of it ends",
            layout=w.Layout(width="auto", flex="0 0 auto"),
        )
        self.button.add_class("distrain-stop")
        if blocking:
            self.button.layout.display = "none"
        self.button.on_click(self._clicked)
        self.where_button = w.Button(
            description="Where?",
            icon="search",
            tooltip="Show where every rank is now (their stacks, grouped)",
            layout=w.Layout(
                width="auto",
                flex="0 0 auto",
                display="" if where is not None and not blocking else "none",
            ),
        )
        self.where_button.add_class("distrain-where")
        self.where_button.on_click(self._where_clicked)
        self.where_out = w.HTML()
        self.where_out.add_class("distrain-where-out")
        # the actions keep a column of their own: header text wraps, it never pushes them out
        self.html.layout = w.Layout(flex="1 1 auto", min_width="0")
        actions = w.HBox([self.where_button, self.button], layout=w.Layout(flex="0 0 auto"))
        actions.add_class("distrain-actions")
        row = w.HBox(
            [self.html, actions],
            layout=w.Layout(justify_content="space-between", align_items="flex-start"),
        )
        self.widget = w.VBox([row, self.where_out])

    def _where_clicked(self, _button: object) -> None:
        where = self._where
        if where is None or self.where_button.disabled:
            return
        self.where_button.disabled = True
        self.where_out.value = '<pre class="distrain-where-text">asking every rank…</pre>'

        def ask() -> None:
            try:
                self.where_out.value = where_html(where())
            except Exception as exc:  # shown where the stacks would be
                text = f"{type(exc).__name__}: {exc}"
                self.where_out.value = f'<pre class="distrain-where-text">{esc(text)}</pre>'
            self.where_button.disabled = False

        threading.Thread(target=ask, name="distrain-where-button", daemon=True).start()

    def _clicked(self, _button: object) -> None:
        with self._lock:
            if self._stopping or self._stop is None:
                return
            self._stopping = True
        self.button.disabled = True
        self.button.description = "Stopping…"
        try:
            self._stop()
        except Exception as exc:  # shown in the header; the job keeps its own state
            self._error = f"stop failed: {type(exc).__name__}: {exc}"
            self.button.disabled = False
            self.button.description = "Stop"
            with self._lock:
                self._stopping = False

    @property
    def stopping(self) -> bool:
        """True once Stop was clicked (until the stop call failed)."""
        return self._stopping

    def render(self, snap: Snapshot, *, over: bool | None = None) -> None:
        """Refresh from ``snap`` (render thread).

        ``over``: whether nothing of the job is left to stop (its backend reported its end, or
        a session cell raised); Stop and Where? go only then. A Failed read from the ranks
        alone is not over: torchrun may restart them, and its processes still run until it
        ends them. None: read from ``snap``'s state.
        """
        ended = snap["state"] in ENDED_STATES if over is None else over
        note = self._error
        if not note and self.blocking and not ended:
            note = BLOCKING_NOTE
        self.html.value = header_html(snap, note=note)
        if not ended and not self.blocking:  # back after a moment that read as an end
            self.button.layout.display = ""
            self.button.disabled = self._stop is None or self._stopping
            self.where_button.layout.display = "" if self._where is not None else "none"
        if ended:  # nothing left to stop: the button goes
            self.button.disabled = True
            self.button.description = "Stop"
            self.button.layout.display = "none"
            self.where_button.layout.display = "none"
            shown = self.where_out.value
            if shown and "data-stale" not in shown:  # stacks of a job that is over
                self.where_out.value = (
                    '<div class="distrain-where-stale" data-stale="true">'
                    '<div class="distrain-note">stacks from while the job ran; it has ended</div>'
                    f"{shown}</div>"
                )
