"""A stopped rank's frames as data: the user's call stack, a frame's variables, an evaluation.

Standard library only; what the notebook's Debugger panel asks a paused rank
(:mod:`.debugger` serves it over the signed channel). ``stack`` is pdb's list
of ``(frame, line)`` pairs, outermost first; frames are named by their index
in it. Everything returned is bounded: at most :data:`MAX_VARIABLES`
variables, each value's ``repr`` cut at :data:`VALUE_CHARS` characters.
"""

from __future__ import annotations

import os
from types import FrameType
from typing import Any, Final

#: Variables listed per scope (the rest are counted, not shown).
MAX_VARIABLES: Final = 100
#: Characters of one value's ``repr``.
VALUE_CHARS: Final = 400
SCOPES: Final = ("locals", "globals")

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_HIDDEN_FILES: Final = ("<frozen runpy>", "<string>")


def is_user_frame(frame: FrameType) -> bool:
    """False for the runtime's own frames (the worker's, pdb's, bdb's), True for the user's."""
    name = frame.f_code.co_filename
    if name.startswith(_PACKAGE_DIR) or name in _HIDDEN_FILES:
        return False
    base = os.path.basename(name)
    return base not in ("bdb.py", "pdb.py", "runpy.py", "threading.py")


def user_stack(stack: list[tuple[FrameType, int]], current: int) -> list[dict[str, Any]]:
    """The user's frames up to ``current``, innermost first: ``index``, ``file``, ``line``,
    ``function``."""
    frames = []
    for index in range(min(current, len(stack) - 1), -1, -1):
        frame, line = stack[index]
        if is_user_frame(frame):
            code = frame.f_code
            frames.append(
                {"index": index, "file": code.co_filename, "line": line, "function": code.co_name}
            )
    return frames


def short_repr(value: Any) -> str:
    """``repr(value)`` cut at :data:`VALUE_CHARS` (a failing ``repr`` says so)."""
    try:
        text = repr(value)
    except Exception as exc:  # a user's __repr__ may raise anything
        text = f"<repr failed: {type(exc).__name__}: {exc}>"
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def variables(namespace: dict[str, Any]) -> dict[str, Any]:
    """``{"variables": [{name, value, type}], "more": N}`` of ``namespace`` (dunders left out)."""
    shown = []
    names = [n for n in namespace if not (n.startswith("__") and n.endswith("__"))]
    for name in names[:MAX_VARIABLES]:
        value = namespace[name]
        shown.append({"name": name, "value": short_repr(value), "type": type(value).__name__})
    return {"variables": shown, "more": max(0, len(names) - MAX_VARIABLES)}


def evaluate(expression: str, frame: FrameType, local: dict[str, Any]) -> dict[str, Any]:
    """``expression`` in ``frame`` (with ``local`` as its locals): ``{"result", "type"}``, or
    ``{"error"}``. A statement runs (``x = 1``) and its result is empty."""
    try:
        try:
            code = compile(expression, "<debugger>", "eval")
        except SyntaxError:
            exec(compile(expression, "<debugger>", "exec"), frame.f_globals, local)
            return {"result": "", "type": ""}
        value = eval(code, frame.f_globals, local)
    except Exception as exc:  # the user's expression: its error is the answer
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"result": short_repr(value), "type": type(value).__name__}
