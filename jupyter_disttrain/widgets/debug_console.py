"""The debugger console: a paused rank's frame and source, an input line, answers per rank.

An ipywidgets panel over a :class:`~jupyter_disttrain.job.Job`: a rank
selector (each paused rank, or every paused rank at once: a cast), the
current frame with its source lines (the current one marked), an input
line for pdb commands (``p x``, ``n``, ``w``, ``c``...) and the answers,
one block per rank. Commands run on a thread of their own, so the kernel
stays free; the panel follows the job's ``paused`` and ``resumed`` events.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from ..debugging import Answer, DebugError
from .text import esc

if TYPE_CHECKING:
    from ..events import Event
    from ..job import Job

__all__ = ["DebugConsole", "RankDropdown"]

#: The selector's value for "every paused rank".
ALL = -1
#: Answers kept in the panel (the oldest go first).
MAX_ANSWERS = 50

_STYLE = """<style>
.distrain-debug pre {margin: 0; font-size: 12px; line-height: 1.35; white-space: pre-wrap}
.distrain-debug .dd-where {font-weight: 600; margin: 2px 0 4px}
.distrain-debug .dd-source {background: var(--jp-layout-color2, #f5f5f5); padding: 4px 6px}
.distrain-debug .dd-current {background: #fff3b0; color: #000; display: inline-block;
  width: 100%}
body[data-jp-theme-light="false"] .distrain-debug .dd-current {background: #4d3f00;
  color: #fff3b0}
.distrain-debug .dd-answer {border-left: 3px solid #3b82f6; padding-left: 6px; margin: 4px 0}
.distrain-debug .dd-error {border-left-color: #dc2626}
</style>"""


def source_html(answer: Answer) -> str:
    """The frame's source lines as HTML, the current line marked."""
    if not answer.source:
        return "<pre class='dd-source'>(no source)</pre>"
    lines = []
    for number, text in answer.source:
        mark = "->" if number == answer.line else "  "
        row = f"{number:>5} {mark} {esc(text)}"
        lines.append(f"<span class='dd-current'>{row}</span>" if number == answer.line else row)
    return "<pre class='dd-source'>" + "\n".join(lines) + "</pre>"


def where_line(answer: Answer) -> str:
    """``rank 1 at cell:12 in train`` (with the exception of a post-mortem stop)."""
    name = "cell" if answer.file.startswith("<distrain-cell") else answer.file
    text = f"rank {answer.rank} at {name}:{answer.line} in {answer.function}"
    if not answer.paused:
        text = f"rank {answer.rank} is running"
    return text + (f" after {answer.exception}" if answer.exception else "")


class RankDropdown(w.Dropdown):  # type: ignore[misc]
    """The rank selector: a pick from the page never interleaves with a refresh.

    A user's pick arrives as a state update on the kernel thread while a
    pause or resume refreshes the options on another; ipywidgets' per-widget
    queues are not safe across threads (see :mod:`.streaming_figure`), so
    :meth:`set_state` holds :attr:`lock`, as :meth:`DebugConsole.refresh` does.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.lock = threading.RLock()
        super().__init__(**kwargs)

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """Apply a front end's state update, never beside a refresh."""
        with self.lock:
            super().set_state(sync_data)


class DebugConsole:
    """The console of ``job``'s paused ranks (``widget`` is the root ipywidget)."""

    def __init__(self, job: Job, rank: int | None = None) -> None:
        self.job = job
        self._lock = threading.Lock()
        self._answers: list[str] = []
        self.ranks = RankDropdown(description="Rank", layout=w.Layout(width="220px"))
        self.where = w.HTML()
        self.source = w.HTML()
        self.line = w.Text(
            placeholder="pdb command: p x, n, s, w, l, c ...",
            continuous_update=False,
            layout=w.Layout(flex="1"),
        )
        self.send_button = w.Button(
            description="Send", button_style="primary", layout=w.Layout(width="80px")
        )
        self.continue_button = w.Button(description="Continue", layout=w.Layout(width="100px"))
        self.answers = w.HTML()
        self.status = w.HTML()
        self.widget = w.VBox(
            [
                w.HTML(_STYLE + f"<b>Debugger</b> — job {esc(job.name)}"),
                w.HBox([self.ranks, self.status]),
                self.where,
                self.source,
                w.HBox([self.line, self.send_button, self.continue_button]),
                self.answers,
            ]
        )
        self.widget.add_class("distrain-debug")
        self.send_button.on_click(lambda _: self.submit())
        self.continue_button.on_click(lambda _: self.submit("c"))
        self.line.observe(self._entered, names="value")  # Enter (continuous_update off)
        self.ranks.observe(lambda _: self._show_frame(), names="value")
        job.add_listener(self._on_event)
        self.refresh(rank)

    # -- state ------------------------------------------------------------------
    def refresh(self, rank: int | None = None) -> None:
        """Rebuild the rank selector from the job's paused ranks and show the chosen frame."""
        paused = self.job.paused()
        options: list[tuple[str, int]] = [(f"rank {p.rank}", p.rank) for p in paused]
        if len(paused) > 1:
            options.append(("all paused ranks", ALL))
        with self.ranks.lock:
            current = rank if rank is not None else self.ranks.value
            values = [v for _, v in options]
            self.ranks.options = options
            if current in values:
                self.ranks.value = current
            elif values:
                self.ranks.value = values[0]
        for control in (self.line, self.send_button, self.continue_button):
            control.disabled = not paused  # nothing to send to while no rank is paused
        if not paused:
            self.status.value = "<i>no rank is paused</i>"
            self.where.value = ""
            self.source.value = ""
        else:
            self.status.value = f"{len(paused)} paused"
            self._show_frame()

    def _show_frame(self) -> None:
        rank = self.ranks.value
        if rank is None or rank == ALL:
            self.where.value = "; ".join(p.sentence() for p in self.job.paused())
            self.source.value = ""
            return
        try:
            answer = self.job.debug(int(rank)).state()
        except DebugError as exc:
            self.where.value = f"<span class='dd-where'>{esc(str(exc))}</span>"
            self.source.value = ""
            return
        self._frame(answer)

    def _frame(self, answer: Answer) -> None:
        self.where.value = f"<div class='dd-where'>{esc(where_line(answer))}</div>"
        self.source.value = source_html(answer) if answer.paused else ""

    def _on_event(self, event: Event) -> None:
        if event.kind in ("paused", "resumed"):
            threading.Thread(target=self.refresh, daemon=True).start()

    # -- commands ---------------------------------------------------------------
    def _entered(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.submit()

    def submit(self, line: str | None = None) -> threading.Thread:
        """Send the input line (or ``line``) to the chosen rank(s), on a thread; returns it."""
        text = self.line.value if line is None else line
        if line is None:
            self.line.value = ""
        thread = threading.Thread(target=self._run, args=(text, self.ranks.value), daemon=True)
        thread.start()
        return thread

    def _run(self, text: str, rank: Any) -> None:
        with self._lock:
            try:
                if rank is None:
                    raise DebugError("no rank is paused")
                if rank == ALL:
                    answers = list(self.job.cast(text).values())
                else:
                    answers = [self.job.debug(int(rank)).ask(text)]
            except DebugError as exc:
                answers = [Answer(int(rank) if rank is not None else -1, "", False, error=str(exc))]
            for answer in answers:
                self._answers.append(self._answer_html(text, answer))
            del self._answers[:-MAX_ANSWERS]
            self.answers.value = "".join(self._answers)  # oldest first, as a terminal
            shown = [a for a in answers if a.paused and a.rank == rank]
            if shown:
                self._frame(shown[0])
        self.refresh()

    @staticmethod
    def _answer_html(command: str, answer: Answer) -> str:
        error = " dd-error" if answer.error else ""
        body = answer.error or answer.output.rstrip("\n") or "(no output)"
        return (
            f"<div class='dd-answer{error}'><pre><b>rank {answer.rank}</b> (Pdb) {esc(command)}"
            f"\n{esc(body)}</pre></div>"
        )

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
