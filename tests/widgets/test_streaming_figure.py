"""StreamingFigure: appends reach the browser as new points only (widgets/streaming_figure.py).

The figure is a real plotly FigureWidget; its comm's ``send`` is wrapped to
record what would go over the wire, and the front end's *ready* message is
delivered the way ipywidgets delivers custom messages.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pytest

from jupyter_disttrain.widgets import reopen, streaming_figure
from jupyter_disttrain.widgets.streaming_figure import StreamingFigure
from jupyter_disttrain.widgets.trace_feed import Update


class Wire:
    """Records every message the widget's comm sends."""

    def __init__(self, widget: Any) -> None:
        self.messages: list[tuple[dict[str, Any], list[Any]]] = []
        original = widget.comm.send

        def send(data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
            self.messages.append((data, list(buffers or [])))
            original(data=data, metadata=metadata, buffers=buffers)

        widget.comm.send = send

    def custom(self) -> list[tuple[dict[str, Any], list[Any]]]:
        return [(m["content"], b) for m, b in self.messages if m.get("method") == "custom"]

    def bytes(self) -> int:
        return sum(memoryview(b).nbytes for _, bufs in self.messages for b in bufs)


def ready(fig: StreamingFigure) -> None:
    """What the front end sends once it listens."""
    fig._handle_custom_msg({"type": "ready"}, [])


@pytest.fixture
def fig() -> StreamingFigure:
    figure = StreamingFigure()
    figure.replace_traces([go.Scatter(x=np.arange(3.0), y=np.zeros(3)), go.Scatter(x=[], y=[])])
    return figure


def test_appends_before_the_front_end_listens_only_change_the_python_side(
    fig: StreamingFigure,
) -> None:
    wire = Wire(fig)
    fig.append([(0, Update(2, np.array([7.0, 8.0]), np.array([1.0, 2.0])))])
    assert list(fig.data[0].x) == [0.0, 1.0, 7.0, 8.0]
    assert list(fig.data[0].y) == [0.0, 0.0, 1.0, 2.0]
    assert wire.messages == []


def test_ready_resyncs_then_appends_carry_only_new_points(fig: StreamingFigure) -> None:
    fig.append([(1, Update(0, np.arange(1000.0), np.ones(1000)))])
    wire = Wire(fig)
    ready(fig)
    assert fig.frontend_ready
    state = [m for m, _ in wire.messages if m.get("method") == "update"]
    assert state and "_widget_data" in state[0]["state"]
    # the redraw names the count the front end's model reaches once the full state is in
    assert state[-1]["state"] == {"_updates": fig._updates}
    assert wire.custom()[-1][0] == {"type": "redraw", "after": fig._updates}
    resync_bytes = wire.bytes()
    assert resync_bytes >= 1003 * 16  # the full data, once

    wire.messages.clear()
    fig.append(
        [
            (0, Update(3, np.array([3.0]), np.array([5.0]))),
            (1, Update(999, np.array([1000.0, 1001.0]), np.array([2.0, 3.0]))),
        ]
    )
    [(content, buffers)] = wire.custom()
    assert content == {
        "type": "append",
        "traces": [0, 1],
        "keep": [3, 999],
        "after": fig._updates,
        "seq": 1,
    }
    assert [np.frombuffer(b, dtype=np.float64).tolist() for b in buffers] == [
        [3.0],
        [5.0],
        [1000.0, 1001.0],
        [2.0, 3.0],
    ]
    assert wire.bytes() == 6 * 8
    assert len(fig.data[1].x) == 1001 and fig.data[1].x[-1] == 1001.0
    assert fig.stats.appends == 1 and fig.shown_points() == 4 + 1001


def test_appends_after_a_rebuild_wait_for_its_traces(fig: StreamingFigure) -> None:
    """The new traces go as state updates, then the count they end with; an append to them
    names that count (its front end holds it until the traces are in)."""
    ready(fig)
    wire = Wire(fig)
    fig.replace_traces([go.Scatter(x=[0.0], y=[1.0])])
    updates = [m["state"] for m, _ in wire.messages if m.get("method") == "update"]
    assert updates[-1] == {"_updates": fig._updates}
    wire.messages.clear()
    fig.append([(0, Update(1, np.array([1.0]), np.array([2.0])))])
    [(content, _)] = wire.custom()
    assert content["after"] == fig._updates


def test_appends_to_missing_traces_are_ignored(fig: StreamingFigure) -> None:
    ready(fig)
    wire = Wire(fig)
    fig.append([(5, Update(0, np.array([1.0]), np.array([1.0])))])
    assert wire.messages == []


def test_every_message_is_counted(fig: StreamingFigure) -> None:
    ready(fig)
    wire = Wire(fig)
    before = fig.stats.messages
    fig.append([(0, Update(0, np.arange(10.0), np.arange(10.0)))])
    fig.update_layout(yaxis_type="log")
    assert fig.stats.messages - before == len(wire.messages)


def test_the_front_end_applies_messages_after_the_state_they_follow(tmp_path: Path) -> None:
    """streaming_figure.js in Node, fed as ipywidgets feeds it (a state update lands after
    its deserialization, a custom message at once): a redraw shows the resync's full data;
    an append extends the traces of the rebuild it follows; initialize returns before
    plotly's module loads (anywidget's budget), an append that came first is applied once
    it loaded; a model that hears nothing says *unheard* each period until it does."""
    node = shutil.which("node")
    assert node is not None, "node runs the front end's module"
    here = Path(__file__).parent
    module = tmp_path / "streaming_figure.js"
    module.write_text(streaming_figure.MODULE)  # the module the widget sends, listening first
    proc = subprocess.run(
        [node, str(here / "streaming_figure_order.mjs"), str(module)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["resync"]["drawn"] == [[0, 1, 2, 3, 4, 5]], seen
    assert seen["rebuild"]["model"] == [10, 11, 12], seen
    assert seen["rebuild"]["drawn"] == [[10, 11, 12]], seen
    slow = seen["slow"]
    assert slow["initialized"] == "returned" and slow["sentBeforeLoad"] == [], seen
    assert slow["modelBeforeLoad"] == [0, 1, 2] and slow["model"] == [0, 1, 2, 3], seen
    assert "ready" in slow["sent"] and "unheard" not in slow["sent"], seen
    deaf = seen["deaf"]
    assert deaf["unanswered"][0] == "ready" and deaf["unanswered"].count("unheard") >= 2, seen
    assert deaf["answered"] == deaf["unanswered"], seen  # quiet once the answer came


def drawn(fig: StreamingFigure, seq: object) -> None:
    """What the front end sends once it has drawn append ``seq``."""
    fig._handle_custom_msg({"type": "drawn", "seq": seq}, [])


def test_a_front_end_that_answers_paces_the_appends(fig: StreamingFigure) -> None:
    """More than IN_FLIGHT appends undrawn: behind, until it draws them or stops answering."""
    ready(fig)
    point = [(0, Update(3, np.array([3.0]), np.array([5.0])))]
    for _ in range(5):
        fig.append(point)
    assert not fig.behind()  # no front end ever answered: nothing is held back
    drawn(fig, 1)
    assert fig.behind()  # 4 of 5 undrawn
    for forged in (True, 99, "4", None):  # not an append number sent: ignored
        drawn(fig, forged)
        assert fig.behind(), forged
    drawn(fig, 3)
    assert not fig.behind()  # 2 undrawn: within IN_FLIGHT
    fig.append(point)
    assert fig.behind()
    later = time.monotonic() + streaming_figure.ANSWER_SECONDS + 0.1
    assert not fig.behind(now=later)  # silent for ANSWER_SECONDS: its page is gone


def test_a_rebuild_on_another_thread_waits_for_the_front_ends_update(fig: StreamingFigure) -> None:
    """A rebuild made while the kernel thread applies the front end's state update would
    land in ipywidgets' per-widget queues mid-flush (its ``_updates`` unsent, or the update
    broken): it waits until the update is applied, then its count goes out."""
    ready(fig)
    wire = Wire(fig)
    started, rebuilt = threading.Event(), threading.Event()
    during: list[bool] = []

    def rebuild() -> None:
        started.set()
        fig.replace_traces([go.Scatter(x=[0.0], y=[1.0])])
        rebuilt.set()

    def on_update(_change: object) -> None:  # runs inside set_state, on the kernel thread
        threading.Thread(target=rebuild, daemon=True).start()
        started.wait(5)
        during.append(rebuilt.wait(0.3))

    fig.observe(on_update, "tooltip")
    fig.set_state({"tooltip": "a view's update"})
    assert rebuilt.wait(10), "the rebuild went on once the update was applied"
    assert during == [False], "the rebuild ran while the front end's update was applied"
    sent = [m["state"]["_updates"] for m, _ in wire.messages if "_updates" in m.get("state", {})]
    assert sent[-1:] == [fig._updates], (sent, fig._updates)


def unheard(fig: StreamingFigure) -> None:
    """What a front end that heard nothing since its *ready* sends."""
    fig._handle_custom_msg({"type": "unheard"}, [])


def test_unheard_right_after_an_answer_is_a_busy_kernels_queue(fig: StreamingFigure) -> None:
    """A busy kernel reads the *ready* and the *unheard* behind it together: its answer
    to the *ready* went out just now, so the model keeps its comm."""
    model_id = fig.model_id
    ready(fig)
    unheard(fig)
    assert (fig.model_id, fig.reopens) == (model_id, 0)


def test_a_front_end_that_heard_nothing_gets_a_new_model_with_the_whole_figure(
    fig: StreamingFigure,
) -> None:
    """No answer reached the front end in time (anywidget dropped it): the old comm
    closes, a new one with a new id opens carrying every point, the container is told,
    and appends go on over the new comm. At most REOPENS times."""
    fig._unheard_seconds = 0.2
    told: list[str] = []
    fig.on_reopened(lambda: told.append(fig.model_id))
    ready(fig)
    old_comm, old_id = fig.comm, fig.model_id
    time.sleep(0.15)  # more than half the front end's wait since the answer
    unheard(fig)
    assert fig.reopens == 1 and fig.comm is not old_comm and fig.model_id != old_id
    assert old_comm._closed and not fig.comm._closed
    assert told == [fig.model_id]
    view = fig._repr_mimebundle_()["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == fig.model_id  # still displayable, as the new model
    opened = [list(t.get("x", ())) for t in fig._widget_data]  # the new comm's open state
    assert opened == [[0.0, 1.0, 2.0], []], opened
    wire = Wire(fig)
    fig.append([(1, Update(keep=0, x=np.array([5.0]), y=np.array([1.0])))])
    assert [m["type"] for m, _ in wire.custom()] == ["append"]
    for _ in range(reopen.REOPENS + 2):
        time.sleep(0.15)
        unheard(fig)
    assert fig.reopens == reopen.REOPENS and len(told) == reopen.REOPENS


def test_no_view_is_counted_so_a_page_never_saves_a_model_whose_comm_was_replaced() -> None:
    """A front end counts a model's views by saving the model as each is removed (when its
    ``_view_count`` is a number, as plotly's FigureWidget sets it); a new comm removes every
    page's views of the old model after its comm closed, and that save threw there."""
    figure = StreamingFigure()
    wire = Wire(figure)
    assert figure._view_count is None
    assert figure.get_state()["_view_count"] is None
    figure._view_count = 3  # nothing a front end or plotly sets turns counting on
    assert figure._view_count is None and not wire.messages
