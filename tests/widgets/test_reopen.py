"""Reopening (widgets/reopen.py): a front end that hears nothing gets a new comm.

Real anywidget models; the front end's *ready* and *unheard* are delivered
the way ipywidgets delivers custom messages, and the comm's ``send`` is
wrapped to record what would go over the wire.
"""

from __future__ import annotations

import time
from typing import Any

import anywidget
import ipywidgets as w
import traitlets

from jupyter_disttrain.widgets import reopen
from jupyter_disttrain.widgets.reopen import REOPENS, Reopening


class Probe(Reopening, anywidget.AnyWidget):
    """A widget with one synced value, in a container."""

    _esm = "export default {}"
    value = traitlets.Int(0).tag(sync=True)


def say(widget: Reopening, kind: str) -> None:
    """What a front end sends: ``ready`` once it listens, ``unheard`` when nothing came."""
    widget._handle_custom_msg({"type": kind}, [])


def recorded(widget: Any) -> list[dict[str, Any]]:
    """The messages ``widget``'s current comm sends from now on."""
    sent: list[dict[str, Any]] = []
    original = widget.comm.send

    def send(data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
        sent.append(data)
        original(data=data, metadata=metadata, buffers=buffers)

    widget.comm.send = send
    return sent


def test_ready_is_answered_and_unheard_right_after_changes_nothing() -> None:
    """The answer is a custom message (what the front end listens for); an *unheard* read
    right behind the *ready* (a busy kernel's queue) keeps the comm."""
    probe = Probe(_unheard_seconds=0.2)
    sent = recorded(probe)
    model_id = probe.model_id
    say(probe, "ready")
    say(probe, "unheard")
    assert [m["content"] for m in sent if m.get("method") == "custom"] == [{"type": "heard"}]
    assert (probe.model_id, probe.reopens) == (model_id, 0)


def test_an_unheard_front_end_gets_a_new_model_and_the_container_shows_it() -> None:
    """The old comm closes, a new id opens with the current state, the container's
    children name it, and the widget stays displayable; at most REOPENS times."""
    probe = Probe(_unheard_seconds=0.2)
    box = w.VBox([probe])
    probe.on_reopened(lambda: box.send_state("children"))
    box_sent = recorded(box)
    say(probe, "ready")
    old_comm, old_id = probe.comm, probe.model_id
    probe.value = 7
    time.sleep(0.15)  # more than half the front end's wait since the answer
    say(probe, "unheard")
    assert probe.reopens == 1 and probe.model_id != old_id
    assert old_comm._closed and not probe.comm._closed
    assert probe.get_state()["value"] == 7
    children = [m["state"]["children"] for m in box_sent if "children" in m.get("state", {})]
    assert children == [[f"IPY_MODEL_{probe.model_id}"]], children
    assert probe.model_id in str(probe._repr_mimebundle_())  # displayable, as the new model
    for _ in range(REOPENS + 2):
        time.sleep(0.15)
        say(probe, "unheard")
    assert probe.reopens == REOPENS


def test_each_reopening_widgets_module_starts_with_the_listening_it_calls() -> None:
    """One listening loop (``hearing.js``) for every reopening widget's front end."""
    from jupyter_disttrain.widgets.checkpoints import CheckpointTable
    from jupyter_disttrain.widgets.streaming_figure import StreamingFigure

    asking = 'model.send({ type: "unheard" })'
    assert reopen.HEARING_JS.count(asking) == 1
    for widget in (StreamingFigure, CheckpointTable):
        module = widget._esm
        assert module.startswith(reopen.HEARING_JS), widget
        own = module[len(reopen.HEARING_JS) :]
        assert own.count("listenForKernel(model, () => heard)") == 1 and asking not in own, widget
