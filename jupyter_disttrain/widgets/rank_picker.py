"""The control that opens ranks of a large job on demand: ``517, 2048-2055`` (kernel side).

Shown only for jobs whose rank table is a summary (see
:mod:`~..monitor.scale`): the ranks typed are listed as rows under it.
DOM: ``.distrain-rank-picker`` holds the text box; a wrong entry says why in
``.distrain-picker-error``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..monitor import Snapshot
from ..monitor.scale import parse_ranks, summarised
from .text import esc

__all__ = ["MAX_OPENED", "RankPicker"]

#: Most ranks opened at once (each is a row of the table).
MAX_OPENED = 256


class RankPicker:
    """A text box for ranks and ranges; :attr:`opened` the ranks it asks for now."""

    def __init__(self, world_size: int, *, on_change: Callable[[], None] = lambda: None) -> None:
        self.world_size = world_size
        self.opened: list[int] = []
        self._on_change = on_change
        self.text = w.Text(
            value="",
            placeholder="e.g. 517, 2048-2055",
            description="open ranks",
            continuous_update=False,
            layout=w.Layout(width="320px"),
        )
        self.error = w.HTML("")
        self.widget = w.HBox([self.text, self.error])
        self.widget.add_class("distrain-rank-picker")
        self._show(summarised(world_size))
        self.text.observe(self._typed, names="value")

    def _show(self, shown: bool) -> None:
        self.widget.layout.display = "" if shown else "none"

    def render(self, snap: Snapshot) -> None:
        """Shown once the job is large (the workers' world size may differ from the plan's)."""
        if snap["world_size"] != self.world_size:
            self.world_size = snap["world_size"]
            self._show(summarised(self.world_size))

    def pick(self, text: str) -> None:
        """Open the ranks ``text`` names (as if typed); a wrong entry keeps the last ranks."""
        self.text.value = text
        self._typed({"new": text})

    def _typed(self, change: dict[str, Any]) -> None:
        text = str(change["new"])
        try:
            ranks = parse_ranks(text, self.world_size)
            if len(ranks) > MAX_OPENED:
                raise ValueError(
                    f"{len(ranks)} ranks asked for; open at most {MAX_OPENED} at once "
                    "(a narrower range)"
                )
        except ValueError as exc:
            self.error.value = f'<span class="distrain-picker-error">{esc(str(exc))}</span>'
            return
        self.error.value = ""
        if ranks != self.opened:
            self.opened = ranks
            self._on_change()
