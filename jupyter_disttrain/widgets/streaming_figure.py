"""A plotly ``FigureWidget`` whose lines grow without resending what the browser holds.

plotly's widget can only replace a trace's arrays. :class:`StreamingFigure`
keeps plotly's front end (loaded by a small wrapper, ``streaming_figure.js``)
and adds one message, *append*: trace ``i`` keeps its first ``keep`` points
and gets new ones, sent as binary float64 buffers. The front end applies it
to the model and every view; this class applies it to the Python-side
figure, so ``fig.data[i].x`` is always what the browser shows.

Appends are sent only after the front end said it is listening (its
*ready* message); the answer to *ready* is the full state, so a figure
built before the browser loaded it, or a reloaded page, shows the same data.
Everything the widget sends is counted in :attr:`StreamingFigure.stats`.

Pace: each append is numbered (``seq``) and the front end answers *drawn*
with the number once it has drawn it. :meth:`StreamingFigure.behind` is true
while a front end that answers is more than :data:`IN_FLIGHT` appends behind:
the dashboard then waits before it renders again, so a browser short of CPU
gets fewer, larger appends instead of a queue it falls minutes behind. A front
end that never answered (none shown, an older page) or has not answered for
:data:`ANSWER_SECONDS` (its page closed) holds nothing back.

Order: ipywidgets applies a state update only after deserializing it
(asynchronously) but hands a custom message to the widget at once, so an
*append* or *redraw* can overtake the update sent before it (the full state
of a resync, the traces of a rebuild). Each such update is followed by one of
``_updates`` (a synced counter), and each custom message names the count it
follows (``after``); the front end holds a message back until its model has
reached that count.

Deaf models: anywidget may stop delivering to a model whose front end was
slow to initialize (:mod:`.reopen`); the figure then opens a new comm carrying
its whole state. Its answer to *ready* is the resync above.

Threads: the dashboard changes the figure on its render thread while the
kernel thread applies the front end's state updates (plotly's views report
their layout and traces). ipywidgets and traitlets queue the notifications of
an update in per-widget state that is not safe across threads: a change made
by another thread meanwhile can go unsent (a lost ``_updates`` holds every
later message back in the browser, so the chart stops growing) or break the
update. :meth:`StreamingFigure.set_state` therefore holds :attr:`StreamingFigure.lock`,
as every change this class makes does.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import plotly
import plotly.graph_objects as go
import traitlets

from .reopen import Reopening, with_hearing
from .trace_feed import Update

__all__ = [
    "ANSWER_SECONDS",
    "IN_FLIGHT",
    "MODULE",
    "SendStats",
    "StreamingFigure",
    "plotly_bundle",
]

#: The front end's module: ``streaming_figure.js`` after the listening it calls.
MODULE = with_hearing(Path(__file__).with_name("streaming_figure.js").read_text("utf-8"))
#: Appends a front end may have left undrawn before :meth:`StreamingFigure.behind` says so.
IN_FLIGHT = 2
#: Seconds after a front end's last *drawn* answer that it still holds appends back.
ANSWER_SECONDS = 5.0


@cache
def plotly_bundle() -> str:
    """plotly's own FigureWidget front-end module (read once)."""
    return (Path(plotly.__file__).parent / "package_data" / "widgetbundle.js").read_text("utf-8")


@dataclass
class SendStats:
    """What the figure sent to the front end since it was created.

    ``points`` counts ``(x, y)`` points in data-carrying messages (appends,
    trace replacements, full resyncs); ``bytes`` every message's JSON plus
    binary buffers; ``resets`` the messages that replaced whole traces.
    """

    messages: int = 0
    bytes: int = 0
    points: int = 0
    appends: int = 0
    resets: int = 0


class StreamingFigure(Reopening, go.FigureWidget):  # type: ignore[misc]
    """``FigureWidget`` with incremental appends (see the module docstring).

    Thread-safe: a render thread may call :meth:`append` and
    :meth:`replace_traces` while the kernel thread handles messages (callbacks
    of :meth:`~.reopen.Reopening.on_reopened` run holding :attr:`lock`).
    """

    _esm = MODULE
    _plotly_esm = traitlets.Unicode("").tag(sync=True)
    _plotly_version = traitlets.Unicode(plotly.__version__).tag(sync=True)
    #: State updates that custom messages depend on, sent so far (see the module docstring).
    _updates = traitlets.Int(0).tag(sync=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock = threading.RLock()
        self._stats = SendStats()
        self._frontend_ready = False
        self._sent = 0  # appends numbered so far
        self._drawn = 0  # the highest append number a front end said it drew
        self._answered: float | None = None  # when a front end last said so (monotonic)
        super().__init__(*args, **kwargs)
        self.on_msg(self._on_frontend_msg)

    @property
    def stats(self) -> SendStats:
        """What was sent so far (see :class:`SendStats`)."""
        return self._stats

    @property
    def lock(self) -> threading.RLock:
        """Held while the figure changes; hold it to change the layout from another thread."""
        return self._lock

    @property
    def frontend_ready(self) -> bool:
        """True once a front end said it listens (appends are sent from then on)."""
        return self._frontend_ready

    @traitlets.validate("_view_count")
    def _count_no_views(self, proposal: Any) -> None:
        """No view counting (plotly's ``FigureWidget`` turns it on): a front end counts its
        views by saving the model as each is removed, and when the kernel opens a new comm
        (:meth:`~.reopen.Reopening._reopen_if_unheard`) every page's views of the old
        model are removed after its comm closed, where that save throws."""
        return None

    @traitlets.default("_plotly_esm")
    def _default_plotly_esm(self) -> str:
        return plotly_bundle()

    # -- data ------------------------------------------------------------------

    def replace_traces(self, traces: Sequence[go.Scatter]) -> None:
        """Remove every trace and add ``traces`` (their data is sent in full)."""
        with self._lock:
            self._stats.points += sum(_points(t) for t in traces)
            self._stats.resets += 1
            self.data = ()
            if traces:
                self.add_traces(list(traces))
            self._updates += 1  # appends to the new traces wait for them

    def append(self, updates: Sequence[tuple[int, Update]]) -> None:
        """Apply :class:`Update` s to traces by index; sends only the new points."""
        with self._lock:
            todo = [(i, u) for i, u in updates if 0 <= i < len(self._data)]
            if not todo:
                return
            for i, u in todo:
                trace = self._data[i]
                trace["x"] = _spliced(trace.get("x"), u.keep, u.x)
                trace["y"] = _spliced(trace.get("y"), u.keep, u.y)
            if not self._frontend_ready:
                return
            buffers: list[bytes] = []
            for _, u in todo:
                buffers.append(np.ascontiguousarray(u.x, dtype=np.float64).tobytes())
                buffers.append(np.ascontiguousarray(u.y, dtype=np.float64).tobytes())
            self._stats.points += sum(u.x.size for _, u in todo)
            self._stats.appends += 1
            self._stats.resets += sum(1 for _, u in todo if u.keep == 0)
            self._sent += 1
            self.send(
                {
                    "type": "append",
                    "traces": [i for i, _ in todo],
                    "keep": [u.keep for _, u in todo],
                    "after": self._updates,
                    "seq": self._sent,
                },
                buffers,
            )

    def behind(self, now: float | None = None) -> bool:
        """True while a front end that answers has more than :data:`IN_FLIGHT` appends left
        to draw, and answered within :data:`ANSWER_SECONDS` (see the module docstring)."""
        answered = self._answered
        if answered is None:
            return False
        now = time.monotonic() if now is None else now
        return self._sent - self._drawn > IN_FLIGHT and now - answered < ANSWER_SECONDS

    def shown_points(self) -> int:
        """Points the figure holds over all traces (what a browser shows)."""
        with self._lock:
            return sum(_points(t) for t in self._data)

    # -- front end ----------------------------------------------------------------

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """Apply a front end's state update, never beside a change from another thread."""
        with self._lock:
            super().set_state(sync_data)

    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if content.get("type") == "drawn":
            seq = content.get("seq")
            if isinstance(seq, int) and not isinstance(seq, bool) and 0 < seq <= self._sent:
                self._drawn = max(self._drawn, seq)
                self._answered = time.monotonic()

    def resync(self) -> None:
        """Send the full state and have every view redraw (answer to *ready*)."""
        with self._lock:
            self._frontend_ready = True
            self._stats.points += self.shown_points()
            self._copy_state()
            # sent even when the kernel's copy did not change: the front end may have missed
            # the trace messages sent before its module loaded (a figure drawn before display)
            self.send_state(["_widget_layout", "_widget_data"])
            self._updates += 1
            self.send({"type": "redraw", "after": self._updates})

    def _copy_state(self) -> None:
        """The synced ``_widget_*`` traits take the figure's current data and layout."""
        self._widget_layout = copy.deepcopy(self._layout_obj._props)
        self._widget_data = copy.deepcopy(self._data)

    def _answer_ready(self) -> None:
        self.resync()

    def _before_reopen(self) -> None:
        self._stats.points += self.shown_points()
        self._copy_state()  # the new model opens with the whole figure

    def _reopen_if_unheard(self) -> None:
        with self._lock:
            super()._reopen_if_unheard()

    def _send(self, msg: dict[str, Any], buffers: list[Any] | None = None) -> None:
        """Count, then send (every message of this widget goes through here)."""
        self._stats.messages += 1
        self._stats.bytes += len(json.dumps(msg, default=str)) + sum(
            memoryview(b).nbytes for b in buffers or ()
        )
        super()._send(msg, buffers)


def _points(trace: Any) -> int:
    x = trace.get("x") if isinstance(trace, dict) else trace.x
    return 0 if x is None else len(x)


def _spliced(old: Any, keep: int, new: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    head = np.empty(0) if old is None else np.asarray(old, dtype=np.float64)[:keep]
    return np.concatenate((head, new))
