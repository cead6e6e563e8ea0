"""The communication panel: NCCL / c10d / gloo summary and diagnosis of a job's log lines.

The monitor parses every log line as it arrives
(:meth:`~jupyter_disttrain.monitor.JobMonitor.comms`), so the reading does
not depend on how often the panel renders, and the sidebar and the command
line show the same diagnosis; the panel only renders it.

DOM contract: ``.distrain-comms`` with ``data-backend`` and
``data-failure``; the diagnosis is ``.distrain-diagnosis``; raw lines are
``.distrain-raw`` inside an accordion titled with their count.
"""

from __future__ import annotations

from dataclasses import replace

import ipywidgets as w

from ..frameworks import own_collectives
from ..monitor import JobMonitor, Snapshot
from ..nccl import RAW_HEAD, NcclSummary, summary_facts
from .text import esc

__all__ = ["CommsPanel", "comms_html", "raw_lines_html"]


def _backend(summary: NcclSummary, dist_backend: str | None) -> str:
    return dist_backend or summary.backend


def comms_html(summary: NcclSummary, dist_backend: str | None, *, quiet: bool = False) -> str:
    """The summary block: one sentence of diagnosis and the per-job facts.

    ``quiet``: the job's own reading names another cause (a rank's error), or the
    job was stopped or succeeded; the lines' reading is then not shown as the problem.
    """
    backend = _backend(summary, dist_backend)
    if quiet and summary.failure != "none":
        summary = replace(summary, diagnosis="")
    attrs = f'data-backend="{esc(backend)}" data-failure="{esc(summary.failure)}"'
    parts: list[str] = []
    if backend == "gloo":
        parts.append(
            "<div>Process-group backend: <b>gloo</b> (collectives over TCP, on CPU); "
            f"NCCL is not in use. {len(summary.comm_lines) + summary.comm_dropped} c10d / gloo "
            "lines.</div>"
        )
        if summary.failure != "none" and summary.diagnosis:
            parts.append(f'<div class="distrain-diagnosis">{esc(summary.diagnosis)}</div>')
    elif own_collectives(backend):
        parts.append(
            f"<div>Collectives: <b>{esc(backend)}</b>, {own_collectives(backend)}'s own (not "
            "torch.distributed, no NCCL): the NCCL and c10d reading does not apply to this job."
            "</div>"
        )
    elif backend == "unknown" and not summary.raw_lines and not summary.comm_lines:
        parts.append("<div>No communication lines yet.</div>")
    else:
        if summary.diagnosis:
            parts.append(f'<div class="distrain-diagnosis">{esc(summary.diagnosis)}</div>')
        parts.append(_facts(summary, backend))
    return f'<div class="distrain-comms" {attrs}>{"".join(parts)}</div>'


def _facts(s: NcclSummary, backend: str) -> str:
    rows = summary_facts(s, backend)
    cells = "".join(
        f'<tr data-field="{esc(name)}"><td>{esc(name)}</td><td>{esc(value)}</td></tr>'
        for name, value in rows
    )
    return f"<table>{cells}</table>"


def raw_lines_html(lines: list[str], dropped: int) -> str:
    """Raw lines in a ``<pre>``, with a marker where lines were left out."""
    if not lines:
        return '<div class="distrain-raw">(none)</div>'
    shown = list(lines)
    if dropped:
        shown.insert(RAW_HEAD, f"… {dropped:,} lines not kept …")
    return f'<div class="distrain-raw">{esc(chr(10).join(shown))}</div>'


class CommsPanel:
    """Summary plus raw lines one click away (``widget``).

    :meth:`render` runs on the render thread; :meth:`summary` is thread-safe.
    """

    def __init__(self, monitor: JobMonitor) -> None:
        self.monitor = monitor
        self.summary_html = w.HTML(comms_html(NcclSummary(), None))
        self.raw = w.HTML()
        self.accordion = w.Accordion(children=[self.raw], selected_index=None)
        self.accordion.set_title(0, "Raw lines (0)")
        self.widget = w.VBox([self.summary_html, self.accordion])
        self.widget.add_class("distrain-comms-panel")

    def summary(self) -> NcclSummary:
        """The monitor's communication reading."""
        return self.monitor.comms()

    def render(self, snap: Snapshot) -> None:
        """Refresh from lines received since the last render."""
        summary = self.summary()
        backend = _backend(summary, snap["dist_backend"])
        quiet = snap["diagnosis"] != summary.diagnosis  # the job's reading is elsewhere
        self.summary_html.value = comms_html(summary, snap["dist_backend"], quiet=quiet)
        if own_collectives(backend):
            lines, dropped, title = summary.raw_lines, summary.raw_dropped, "Communication lines"
        elif backend == "gloo" or (not summary.raw_lines and summary.comm_lines):
            lines, dropped, title = summary.comm_lines, summary.comm_dropped, "c10d / gloo lines"
        else:
            lines, dropped, title = summary.raw_lines, summary.raw_dropped, "Raw NCCL lines"
        self.accordion.set_title(0, f"{title} ({len(lines) + dropped:,})")
        self.raw.value = raw_lines_html(lines, dropped)
