"""The checkpoint browser: a sortable table, a detail view, and Load / Resume / Delete.

:class:`CheckpointBrowser` shows a :class:`~jupyter_disttrain.checkpoints.CheckpointStore`.
Clicking a column header sorts by it (again: reverse), clicking a row selects
it; the selection's detail view lists its keys, tensors (shapes, dtypes) and
total parameters. Load puts the state into a notebook variable, Resume
puts a ``%%distrain --resume`` cell right below the browser (the lab extension; in
other front ends the next input), Delete removes the
checkpoint after a second click. The sorting and the actions are Python
(testable without a browser); :class:`CheckpointTable` only renders rows and
reports clicks. Displayed, the browser also carries a static text and HTML
table for frontends without widgets.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets as w
import traitlets

from ..checkpoints.jobs import resume_cell
from ..checkpoints.store import (
    CheckpointDetails,
    CheckpointError,
    CheckpointInfo,
    CheckpointStore,
    format_metrics,
    format_table,
    format_time,
)
from ..units import format_bytes
from .cell_insert import insert_below
from .reopen import Reopening, with_hearing
from .text import esc

if TYPE_CHECKING:
    from ..job import Job

__all__ = ["CheckpointBrowser", "CheckpointTable", "static_html"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
BASE_COLUMNS = ("step", "time", "size")
TAIL_COLUMNS = ("world", "status")

_ESM = """
function render({ model, el }) {
  const draw = () => {
    const cols = model.get("columns"), rows = model.get("rows");
    const by = model.get("sort_by"), desc = model.get("descending");
    const sel = model.get("selected");
    const table = document.createElement("table");
    table.className = "distrain-ckpt-table";
    const head = table.createTHead().insertRow();
    for (const col of cols) {
      const th = document.createElement("th");
      th.textContent = col + (col === by ? (desc ? " \\u25BC" : " \\u25B2") : "");
      th.dataset.col = col;
      th.onclick = () => {
        if (model.get("sort_by") === col) model.set("descending", !model.get("descending"));
        else { model.set("sort_by", col); model.set("descending", col !== "step"); }
        model.save_changes();
      };
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const row of rows) {
      const tr = body.insertRow();
      tr.dataset.step = row.step;
      tr.dataset.status = row.status;
      if (row.step === sel) tr.classList.add("distrain-selected");
      row.cells.forEach((text, i) => {
        const td = tr.insertCell();
        td.textContent = text;
        td.dataset.col = cols[i];
      });
      tr.onclick = () => { model.set("selected", row.step); model.save_changes(); };
    }
    el.replaceChildren(table);
  };
  for (const name of ["rows", "columns", "sort_by", "descending", "selected"]) {
    model.on("change:" + name, draw);
  }
  draw();
}
// "ready", then "unheard" until a message arrives (hearing.js, the text before this one)
function initialize({ model }) {
  let heard = false;
  model.on("msg:custom", () => { heard = true; });
  listenForKernel(model, () => heard);
}
export default { initialize, render };
"""

_CSS = """
.distrain-ckpt-table { border-collapse: collapse; font-size: 12px;
  font-variant-numeric: tabular-nums; }
.distrain-ckpt-table th { cursor: pointer; text-align: left; border-bottom: 1px solid #ccc;
  padding: 2px 10px 2px 4px; user-select: none; }
.distrain-ckpt-table td { padding: 2px 10px 2px 4px; }
.distrain-ckpt-table tbody tr { cursor: pointer; }
.distrain-ckpt-table tbody tr:hover { background: rgba(26, 115, 232, 0.08); }
.distrain-ckpt-table tr.distrain-selected { background: rgba(26, 115, 232, 0.18); }
.distrain-ckpt-table tr[data-status="corrupt"], .distrain-ckpt-table tr[data-status="incomplete"]
  { color: #c5221f; }
"""


class CheckpointTable(Reopening, anywidget.AnyWidget):
    """The table view: renders ``rows`` under ``columns``; header and row clicks set traits.

    A front end that never hears the kernel gets a new comm (:mod:`.reopen`).
    """

    _esm = with_hearing(_ESM)
    _css = _CSS
    columns = traitlets.List(traitlets.Unicode()).tag(sync=True)
    rows = traitlets.List(traitlets.Dict()).tag(sync=True)
    sort_by = traitlets.Unicode("step").tag(sync=True)
    descending = traitlets.Bool(True).tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)


def _metric_names(infos: list[CheckpointInfo]) -> list[str]:
    seen: dict[str, None] = {}
    for c in infos:
        for name in c.metrics:
            seen.setdefault(name, None)
    return list(seen)


def _sort_value(c: CheckpointInfo, column: str) -> tuple[int, Any]:
    """Missing values sort last whatever the direction (handled by the caller)."""
    value: Any
    if column == "step":
        value = c.step
    elif column == "time":
        value = c.time
    elif column == "size":
        value = c.bytes
    elif column == "world":
        value = c.world_size
    elif column == "status":
        value = c.status
    else:
        value = c.metrics.get(column)
        if value is not None and math.isnan(value):
            value = None
    return (1, 0) if value is None else (0, value)


def sort_infos(infos: list[CheckpointInfo], column: str, descending: bool) -> list[CheckpointInfo]:
    """``infos`` sorted by a column (``step``, ``time``, ``size``, a metric ...); blanks last."""
    present = [c for c in infos if _sort_value(c, column)[0] == 0]
    blank = [c for c in infos if _sort_value(c, column)[0] == 1]
    present.sort(key=lambda c: (_sort_value(c, column)[1], c.step), reverse=descending)
    return present + sorted(blank, key=lambda c: c.step)


def _cells(c: CheckpointInfo, metrics: list[str]) -> list[str]:
    values = [f"{c.metrics[m]:.4g}" if m in c.metrics else "" for m in metrics]
    status = c.status if c.ok else f"{c.status}: {c.reason}"
    return [
        str(c.step),
        format_time(c.time),
        format_bytes(c.bytes),
        *values,
        str(c.world_size),
        status,
    ]


def static_html(infos: list[CheckpointInfo], uri: str) -> str:
    """The table as plain HTML (saved notebooks, frontends without widgets)."""
    metrics = _metric_names(infos)
    head = "".join(f"<th>{esc(c)}</th>" for c in (*BASE_COLUMNS, *metrics, *TAIL_COLUMNS))
    body = "".join(
        f'<tr data-status="{esc(c.status)}">'
        + "".join(f"<td>{esc(x)}</td>" for x in _cells(c, metrics))
        + "</tr>"
        for c in infos
    )
    title = f"<div>{esc(uri)}: {len(infos)} checkpoint(s)</div>"
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="distrain-ckpt-static">{title}{table}</div>'


def details_html(info: CheckpointInfo, details: CheckpointDetails | None, error: str = "") -> str:
    """The detail view of one checkpoint."""
    parts = [
        f"<b>step {info.step}</b> &middot; {esc(info.layout)} &middot; "
        f"{esc(format_bytes(info.bytes))} &middot; saved {esc(format_time(info.time))} by "
        f"{info.world_size} rank(s){' of job ' + esc(info.job) if info.job else ''}",
        f"<div>{esc(info.uri)}</div>",
        f"<div>sha256 {esc(info.sha256[:16])}&hellip; &middot; "
        + esc(", ".join(f"{k} {v}" for k, v in info.versions.items()))
        + "</div>",
    ]
    if info.metrics:
        parts.append(f"<div>metrics: {esc(format_metrics(info.metrics))}</div>")
    if not info.ok:
        parts.append(f'<div class="distrain-reason">{esc(info.status)}: {esc(info.reason)}</div>')
    if error:
        parts.append(f'<div class="distrain-reason">{esc(error)}</div>')
    if details is not None:
        groups = ", ".join(f"{esc(k)} {v:,}" for k, v in details.by_key().items())
        parts.append(
            f"<div>keys: {esc(', '.join(details.keys))} &middot; total parameters "
            f"{details.parameters:,}{' (' + groups + ')' if groups else ''}</div>"
        )
        rows = "".join(
            f"<tr><td>{esc(t.name)}</td><td>{esc('x'.join(map(str, t.shape)) or 'scalar')}</td>"
            f"<td>{esc(t.dtype)}</td><td>{t.numel:,}</td></tr>"
            for t in details.tensors[:60]
        )
        more = len(details.tensors) - 60
        parts.append(
            '<table class="distrain-ckpt-tensors"><tr><th>tensor</th><th>shape</th>'
            f"<th>dtype</th><th>elements</th></tr>{rows}</table>"
            + (f'<div class="distrain-more">{more} more tensors</div>' if more > 0 else "")
        )
        if details.others:
            other = ", ".join(f"{esc(k)}={esc(v)}" for k, v in list(details.others.items())[:20])
            parts.append(f"<div>other values: {other}</div>")
    return '<div class="distrain-ckpt-detail">' + "".join(parts) + "</div>"


class CheckpointBrowser:
    """Browse ``store`` (``widget`` is the root ipywidget); see the module docstring.

    ``job`` (optional) supplies the cell and scale for Resume; ``shell`` is
    the IPython shell that receives loaded variables and the resume cell.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        job: Job | None = None,
        shell: Any = None,
        describe: bool = True,
    ) -> None:
        self.store = store
        self.job = job
        self.shell = shell
        self.describe = describe
        self.infos: list[CheckpointInfo] = []
        self.table = CheckpointTable()
        self.detail = w.HTML()
        self.status = w.HTML()
        self.var_name = w.Text(
            value="checkpoint", description="variable", layout=w.Layout(width="220px")
        )
        self.load_button = self._button("Load into notebook", "download", self.load_selected)
        self.resume_button = self._button("Resume a job from here", "play", self.resume_selected)
        self.delete_button = self._button("Delete", "trash", self.delete_selected, "danger")
        self.refresh_button = self._button("Refresh", "refresh", self.refresh)
        self._confirm: int | None = None
        actions = w.HBox(
            [
                self.var_name,
                self.load_button,
                self.resume_button,
                self.delete_button,
                self.refresh_button,
            ],
            layout=w.Layout(flex_flow="row wrap", gap="4px 8px"),
        )
        self.title = w.HTML()
        self.widget = w.VBox([self.title, self.table, actions, self.status, self.detail])
        self.widget.add_class("distrain-ckpt-browser")
        # a table on a new comm is a new model: the browser's view must make a view of it
        self.table.on_reopened(lambda: self.widget.send_state("children"))
        self.anchor = secrets.token_hex(8)  # where the front end puts a resume cell (below)
        self.widget.add_class(f"distrain-ckpt-{self.anchor}")
        self.table.observe(lambda _c: self._render_rows(), names=["sort_by", "descending"])
        self.table.observe(lambda _c: self._show_selected(), names="selected")
        self.refresh()

    def _button(
        self, label: str, icon: str, action: Callable[[], object], style: str = ""
    ) -> w.Button:
        button = w.Button(
            description=label, icon=icon, button_style=style, layout=w.Layout(width="auto")
        )

        def click(_b: w.Button) -> None:
            try:
                action()
            except Exception as exc:  # shown, never raised into the comm handler
                self._say(f"{type(exc).__name__}: {exc}", error=True)

        button.on_click(click)
        return button

    # -- state -----------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the directory's listing."""
        self.infos = self.store.list()
        metrics = _metric_names(self.infos)
        self.table.columns = [*BASE_COLUMNS, *metrics, *TAIL_COLUMNS]
        if self.table.sort_by not in self.table.columns:
            self.table.sort_by = "step"
        self.title.value = f"<b>{esc(self.store.uri)}</b>: {len(self.infos)} checkpoint(s)" + (
            "" if self.infos else " (none saved yet)"
        )
        self._render_rows()
        steps = {c.step for c in self.infos}
        if self.table.selected not in steps:
            latest = [c for c in self.infos if c.ok]
            self.table.selected = latest[-1].step if latest else -1
        else:
            self._show_selected()

    def sorted_infos(self) -> list[CheckpointInfo]:
        """The listing in the table's current order."""
        return sort_infos(self.infos, self.table.sort_by, self.table.descending)

    def _render_rows(self) -> None:
        metrics = _metric_names(self.infos)
        self.table.rows = [
            {"step": c.step, "status": c.status, "cells": _cells(c, metrics)}
            for c in self.sorted_infos()
        ]

    def selected(self) -> CheckpointInfo | None:
        """The selected checkpoint, if any."""
        return next((c for c in self.infos if c.step == self.table.selected), None)

    def select(self, step: int) -> None:
        """Select a row (as a click does)."""
        self.table.selected = step

    def _show_selected(self) -> None:
        self._confirm = None
        self.delete_button.description = "Delete"
        info = self.selected()
        if info is None:
            self.detail.value = ""
            return
        details, error = None, ""
        if self.describe and info.ok:
            try:
                details = self.store.describe(info.step)
            except Exception as exc:
                error = f"cannot read its contents: {type(exc).__name__}: {exc}"
        self.detail.value = details_html(info, details, error)

    def _say(self, text: str, *, error: bool = False) -> None:
        cls = "distrain-reason" if error else "distrain-note"
        self.status.value = f'<div class="{cls}">{esc(text)}</div>'

    def _need(self) -> CheckpointInfo:
        info = self.selected()
        if info is None:
            raise CheckpointError("select a checkpoint first (click its row)")
        return info

    # -- actions ---------------------------------------------------------------
    def load_selected(self) -> Any:
        """Load the selected checkpoint into the notebook variable named in the text box."""
        info = self._need()
        name = self.var_name.value.strip()
        if not name.isidentifier():
            raise CheckpointError(f"{name!r} is not a valid Python variable name")
        state = self.store.load(info.step)
        if self.shell is not None:
            self.shell.user_ns[name] = state
        self._say(f"loaded step {info.step} into `{name}`")
        return state

    def resume_selected(self) -> str:
        """Put a ``%%distrain --resume STEP`` cell for the selection right below the browser.

        Through the lab extension (:mod:`.cell_insert`); without it, in the next input.
        """
        info = self._need()
        text = resume_cell(self.store.uri, info.step, self.job)
        if self.shell is None:
            return text

        def told(inserted: bool) -> None:
            where = "the cell below" if inserted else "the next cell"
            self._say(f"{where} resumes from step {info.step}: run it to start the job")

        insert_below(self.shell, self.anchor, text, told)
        return text

    def delete_selected(self) -> bool:
        """First call asks for confirmation, the second (same selection) deletes."""
        info = self._need()
        if self._confirm != info.step:
            self._confirm = info.step
            self.delete_button.description = f"Confirm: delete step {info.step}"
            self._say(f"click again to delete step {info.step} ({info.uri})")
            return False
        self.store.delete(info.step)
        self._say(f"deleted step {info.step}")
        self.refresh()
        return True

    # -- display ---------------------------------------------------------------
    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {
            WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id},
            "text/plain": f"{self.store.uri}: {len(self.infos)} checkpoint(s)\n"
            + format_table(self.infos),
            "text/html": static_html(self.infos, self.store.uri),
        }
