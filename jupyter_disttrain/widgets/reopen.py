"""A new comm for an anywidget model whose front end never hears the kernel.

anywidget (0.9.14 to 0.11 at least) drops every message to a model whose
front end took longer than its budget (2 s) to initialize, for the model's
whole life; a page short of CPU can overrun it. Such a model shows the state
it was opened with and nothing after: a chart that never grows, a table
whose clicks are sent but whose new rows never arrive.

The exchange, for a widget that mixes in :class:`Reopening`:

- the front end sends ``{"type": "ready"}`` once it listens; the kernel
  answers with at least one custom message (:meth:`Reopening._answer_ready`;
  by default ``{"type": "heard"}``);
- a front end that received no custom message ``_unheard_seconds`` after its
  *ready* sends ``{"type": "unheard"}``, again each period, a bounded number
  of times;
- on *unheard*, unless a *ready* was answered within half that period (a
  busy kernel reads the *ready* and the *unheard* behind it together, and its
  answer is on its way), the widget closes its comm and opens one with a new
  id carrying its whole state (at most :data:`REOPENS` times), then calls
  what :meth:`Reopening.on_reopened` registered: a container resends its
  children, so its views make a view of the new model.

The front end's half is ``hearing.js`` (:data:`HEARING_JS`): each such widget's
module starts with its text (:func:`with_hearing`) and calls its
``listenForKernel(model, heard)`` once it listens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import ipywidgets as w
import traitlets

__all__ = ["HEARING_JS", "REOPENS", "UNHEARD_SECONDS", "Reopening", "with_hearing"]

#: Seconds a front end waits for any message after its *ready* before it says *unheard*.
UNHEARD_SECONDS = 5.0
#: New comms a widget opens at most for front ends that said *unheard*.
REOPENS = 3
#: The front end's half of the exchange (``hearing.js``): ``listenForKernel(model, heard)``.
HEARING_JS: Final = Path(__file__).with_name("hearing.js").read_text("utf-8")


def with_hearing(module: str) -> str:
    """``module`` (a widget's front-end ES module text, which calls ``listenForKernel``)
    after :data:`HEARING_JS`: the text of a :class:`Reopening` widget's ``_esm``."""
    return f"{HEARING_JS}\n{module}"


class Reopening(w.Widget):  # type: ignore[misc]
    """Mixin: answers *ready*, and opens a new comm on *unheard* (see the module docstring).

    Mixed in before the anywidget class (``class T(Reopening, anywidget.AnyWidget)``).
    Not thread-safe by itself: a widget changed from another thread overrides
    :meth:`_reopen_if_unheard` to hold its lock.
    """

    #: How long the front end waits to hear from the kernel.
    _unheard_seconds = traitlets.Float(UNHEARD_SECONDS).tag(sync=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._ready_answered: float | None = None  # monotonic
        self._reopens = 0
        self._reopened: list[Callable[[], None]] = []
        super().__init__(*args, **kwargs)
        self.on_msg(self._on_hearing_msg)

    @property
    def reopens(self) -> int:
        """New comms opened so far for front ends that heard nothing."""
        return self._reopens

    def on_reopened(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each new comm (the widget then has a new model id)."""
        self._reopened.append(callback)

    def _answer_ready(self) -> None:
        """Answer a front end's *ready* with at least one custom message."""
        self.send({"type": "heard"})

    def _before_reopen(self) -> None:
        """Bring the synced traits up to date before the new comm sends them (no comm now)."""

    def _on_hearing_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if content.get("type") == "ready":
            self._answer_ready()
            self._ready_answered = time.monotonic()
        elif content.get("type") == "unheard":
            self._reopen_if_unheard()

    def _reopen_if_unheard(self) -> None:
        """A new comm for a front end that heard nothing (see the module docstring)."""
        answered = self._ready_answered
        if answered is not None and time.monotonic() - answered < self._unheard_seconds / 2:
            return
        if self._reopens >= REOPENS or self.comm is None:
            return
        self._reopens += 1
        self.close()
        self.__dict__.pop("_repr_mimebundle_", None)  # close() hides the widget's repr
        self._model_id = None  # a new id: the containers' views make new views of it
        self._before_reopen()
        self.open()
        for callback in self._reopened:
            callback()
