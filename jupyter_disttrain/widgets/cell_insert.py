"""A cell put right below a widget's own cell by the lab extension (``labextension/src/cells.ts``).

The kernel opens a comm to the front end's target ``jupyter_disttrain.cells`` with the
widget's anchor (the element of class ``distrain-ckpt-<anchor>``) and the cell's source; the
front end inserts the cell below the one showing the anchor, selects it, answers
``{"inserted": true}`` and closes the comm. A front end without the target closes it
unanswered (or answers false): then IPython's next input gets the cell, which a front end
shows after the next execution.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["TARGET", "insert_below"]

TARGET = "jupyter_disttrain.cells"


def insert_below(shell: Any, anchor: str, source: str, told: Callable[[bool], None]) -> None:
    """Ask the front end for ``source`` below ``anchor``'s cell; ``told(inserted)`` once known.

    Without a kernel (plain IPython) the next input gets ``source`` at once.
    """
    if getattr(shell, "kernel", None) is None:
        shell.set_next_input(source, replace=False)
        told(False)
        return
    from comm import create_comm

    answered: list[bool] = []

    def answer(inserted: bool) -> None:
        if answered:
            return
        answered.append(inserted)
        if not inserted:
            shell.set_next_input(source, replace=False)
        told(inserted)

    def on_msg(msg: dict[str, Any]) -> None:
        data = msg.get("content", {}).get("data", {})
        answer(isinstance(data, dict) and data.get("inserted") is True)

    comm = create_comm(target_name=TARGET, data={"anchor": anchor, "source": source})
    comm.on_msg(on_msg)
    comm.on_close(lambda _msg: answer(False))
