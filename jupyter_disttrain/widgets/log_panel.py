"""The log panel: the ranks' output with a rank filter, search, follow/pause and folding.

Memory is the monitor's: a ring buffer of ``monitor.log_limit`` lines per
rank (the panel says so); the panel itself renders at most ``max_lines``
entries, and while following it refreshes at most ``max_rate`` times a
second (a control change refreshes at once): nobody reads a flood at 10
frames a second, and folding costs time the kernel needs. Lines printed
identically by several ranks fold into one entry (``[ranks 0-7] Epoch 3
done``); *First difference* jumps to the first line at which the ranks'
output differs (``monitor.log_divergence()``). The launcher's own lines
(torchrun's, job-wide) are folded away by default: *launcher lines* shows them,
and so does choosing "job (launcher)" in the rank filter.

DOM contract: ``.distrain-logs`` (``data-view`` ``tail`` or ``divergence``)
holding ``.distrain-log-line`` entries with ``data-ranks`` (``0-3`` or
``job``) and ``data-seq``; the rank label is ``.distrain-log-rank``; lines
where the ranks differ have ``distrain-log-diverge``.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as w

from ..events import ENDED_STATES
from ..logbuffer import JOB_RANK, Divergence, FoldedLine, format_ranks, rank_label
from ..monitor import JobMonitor, Snapshot
from .text import esc

__all__ = ["LogPanel", "logs_html"]

_ALL = "all"
_CONTEXT = 10  # lines shown before the first difference


def logs_html(
    entries: Sequence[FoldedLine],
    *,
    view: str = "tail",
    diverge: frozenset[int] = frozenset(),
    ended: bool = False,
) -> str:
    """The lines box; ``diverge`` holds the ``seq`` of lines to mark as differing.

    With no lines it says so: "no output yet" while the job runs, "no output"
    once it ``ended``.
    """
    if not entries:
        empty = "no output" if ended else "no output yet"
        body = f'<div class="distrain-log-empty">{empty}</div>'
    else:
        body = "".join(_line(e, e.seq in diverge) for e in entries)
    return (
        f'<div class="distrain-logs" data-view="{view}" data-count="{len(entries)}">'
        f"<div>{body}</div></div>"
    )


def _line(entry: FoldedLine, differs: bool) -> str:
    ranks = "job" if entry.ranks == (JOB_RANK,) else format_ranks(entry.ranks)
    cls = "distrain-log-line distrain-log-diverge" if differs else "distrain-log-line"
    return (
        f'<div class="{cls}" data-seq="{entry.seq}" data-ranks="{ranks}">'
        f'<span class="distrain-log-rank">[{esc(rank_label(entry.ranks))}]</span> '
        f"{esc(entry.text)}</div>"
    )


class LogPanel:
    """Controls plus the rendered lines (``widget``); :meth:`render` runs on the render thread."""

    def __init__(
        self,
        monitor: JobMonitor,
        *,
        max_lines: int = 200,
        max_rate: float = 4.0,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.monitor = monitor
        self.max_lines = max_lines
        self.min_interval = 1.0 / max_rate
        self._shown_at = -math.inf
        self.rank = w.Dropdown(
            options=[("all ranks", _ALL)], value=_ALL, description="rank", layout=_width("170px")
        )
        self.search = w.Text(placeholder="search", continuous_update=True, layout=_width("200px"))
        self.follow = w.ToggleButton(
            value=True,
            description="Follow",
            icon="pause",
            tooltip="Follow new output; click to pause and scroll",
            layout=_width("auto"),
        )
        self.fold = w.Checkbox(value=True, description="fold repeats", indent=False)
        self.fold.layout = _width("auto")
        self.launcher = w.Checkbox(value=False, description="launcher lines", indent=False)
        self.launcher.layout = _width("auto")
        self.first_difference = w.Button(
            description="First difference",
            tooltip="Show the first line where the ranks' output differs",
            layout=_width("auto"),
        )
        self.first_difference.add_class("distrain-first-difference")
        self.status = w.HTML()
        self.lines = w.HTML(logs_html([]))
        for control in (self.rank, self.search, self.follow, self.fold, self.launcher):
            control.observe(lambda _change: on_change(), names="value")
        self.follow.observe(self._follow_changed, names="value")
        self._on_change = on_change
        self.first_difference.on_click(self._jump_clicked)
        row = w.HBox(
            [
                self.rank,
                self.search,
                self.follow,
                self.fold,
                self.launcher,
                self.first_difference,
            ],
            layout=w.Layout(flex_flow="row wrap", gap="4px 10px", align_items="center"),
        )
        self.widget = w.VBox([row, self.status, self.lines])
        self.widget.add_class("distrain-log-panel")
        self._world = -1
        self._total = -1
        self._following = True
        self._ended = False  # the lines were last shown for an ended job
        self._filters: tuple[Any, ...] | None = None
        self._jump_requested = False
        self._divergence: Divergence | None = None
        self._jump_note = ""

    # -- controls (kernel thread) ---------------------------------------------------

    def _jump_clicked(self, _button: object) -> None:
        self._jump_requested = True
        self._on_change()

    def _follow_changed(self, change: dict[str, Any]) -> None:
        following = bool(change["new"])
        self.follow.description = "Follow" if following else "Paused"
        self.follow.icon = "pause" if following else "play"
        if following:
            self._jump_note = ""

    def selected_ranks(self) -> list[int] | None:
        """Ranks the filter selects (``None``: all)."""
        value = self.rank.value
        return None if value in (_ALL, None) else [int(value)]

    # -- rendering (render thread) ------------------------------------------------------

    def render(self, snap: Snapshot) -> None:
        """Refresh the lines (unless paused) and the status line."""
        if snap["world_size"] != self._world:
            self._world = snap["world_size"]
            options = [("all ranks", _ALL), ("job (launcher)", str(JOB_RANK))]
            options += [(f"rank {r}", str(r)) for r in range(self._world)]
            with self.rank.hold_sync():
                current = self.rank.value
                self.rank.options = options
                self.rank.value = current if current in dict(options).values() else _ALL
        ranks = self.selected_ranks()
        if ranks is None and not self.launcher.value:  # the ranks' own output only
            ranks = list(range(self._world))
        search = str(self.search.value or "")
        fold = bool(self.fold.value)
        filters = (tuple(ranks or ()), search, fold)
        following = bool(self.follow.value)
        resumed = following and not self._following
        ended = snap["state"] in ENDED_STATES
        self._following = following
        if self._jump_requested:
            self._jump_requested = False
            self._show_divergence(ranks)
            self._filters = filters
            self._following = bool(self.follow.value)
        elif (
            resumed
            or filters != self._filters
            or ended != self._ended
            or (
                following
                and snap["logs"]["total"] != self._total
                and time.monotonic() - self._shown_at >= self.min_interval
            )
        ):
            # resuming or a filter change shows at once; new lines at the panel's rate
            self._filters = filters
            self._total = snap["logs"]["total"]
            self._shown_at = time.monotonic()
            self._ended = ended
            self.lines.value = logs_html(self._entries(ranks, search, fold), ended=ended)
        self.status.value = self._status(snap)

    def _entries(self, ranks: list[int] | None, search: str, fold: bool) -> list[FoldedLine]:
        if fold:
            return self.monitor.folded_logs(ranks, search or None, self.max_lines)
        lines = self.monitor.log_lines(ranks, search or None, self.max_lines)
        return [FoldedLine(ln.seq, ln.t, (ln.rank,), ln.text) for ln in lines]

    def _show_divergence(self, ranks: list[int] | None) -> None:
        found = self.monitor.log_divergence(ranks)
        self._divergence = found
        self._total = -1
        if found is None:
            self._jump_note = "The ranks' kept output does not differ."
            return
        self.follow.value = False
        lines = self.monitor.log_lines(ranks)
        at = bisect.bisect_left([ln.seq for ln in lines], found.seq)
        window = lines[max(0, at - _CONTEXT) : max(0, at - _CONTEXT) + self.max_lines]
        marked = frozenset(ln.seq for ln in window if ln.n == found.n and ln.rank in found.texts)
        entries = [FoldedLine(ln.seq, ln.t, (ln.rank,), ln.text) for ln in window]
        self.lines.value = logs_html(entries, view="divergence", diverge=marked)
        texts = "; ".join(f"rank {r}: {t!r}" for r, t in sorted(found.texts.items())[:4])
        self._jump_note = f"First difference at line {found.n + 1} of each rank's output: {texts}"

    def _status(self, snap: Snapshot) -> str:
        logs = snap["logs"]
        parts = [
            f"keeps the last {self.monitor.log_limit:,} lines per rank",
            f"{logs['total']:,} lines received",
        ]
        if logs["dropped"]:
            parts.append(f"{logs['dropped']:,} older lines dropped")
        parts.append(f"showing at most {self.max_lines}")
        if not self.launcher.value and self.selected_ranks() is None:
            parts.append("launcher lines folded")
        if not self.follow.value:
            parts.append("paused")
        text = " · ".join(parts)
        note = (
            f'<div class="distrain-log-note">{esc(self._jump_note)}</div>'
            if self._jump_note
            else ""
        )
        return f'<div class="distrain-note distrain-log-status">{esc(text)}</div>{note}'


def _width(value: str) -> w.Layout:
    return w.Layout(width=value)
