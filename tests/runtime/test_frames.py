"""A stopped rank's frames as data: bounded variables, evaluations, the user's stack only."""

from __future__ import annotations

import sys
from typing import Any

from jupyter_disttrain.runtime import frames


class Loud:
    def __repr__(self) -> str:
        raise ValueError("no")


def test_variables_are_bounded_and_leave_dunders_out() -> None:
    namespace: dict[str, Any] = {f"v{i}": "x" * 1000 for i in range(frames.MAX_VARIABLES + 7)}
    namespace["__name__"] = "__main__"
    shown = frames.variables(namespace)
    assert len(shown["variables"]) == frames.MAX_VARIABLES and shown["more"] == 7
    first = shown["variables"][0]
    assert first["name"] == "v0" and first["type"] == "str"
    assert len(first["value"]) == frames.VALUE_CHARS and first["value"].endswith("...")
    assert frames.short_repr(Loud()) == "<repr failed: ValueError: no>"


def test_evaluate_an_expression_a_statement_and_an_error() -> None:
    frame = sys._getframe()
    local = {"a": 4}
    assert frames.evaluate("a * 2", frame, local) == {"result": "8", "type": "int"}
    assert frames.evaluate("b = a + 1", frame, local) == {"result": "", "type": ""}
    assert local["b"] == 5
    assert frames.evaluate("1 / 0", frame, local) == {
        "error": "ZeroDivisionError: division by zero"
    }


def frame_in(filename: str) -> Any:
    code = compile("def f():\n    return sys._getframe()\n", filename, "exec")
    scope: dict[str, Any] = {"sys": sys}
    exec(code, scope)
    return scope["f"]()


def test_the_user_stack_leaves_the_runtime_out_innermost_first() -> None:
    outer, runtime, inner = (
        frame_in("<distrain-cell>"),
        frame_in(frames.__file__),
        frame_in("/u/m.py"),
    )
    stack = [(outer, 10), (runtime, 20), (inner, 2)]
    listed = frames.user_stack(stack, 2)
    assert [(f["index"], f["file"], f["line"]) for f in listed] == [
        (2, "/u/m.py", 2),
        (0, "<distrain-cell>", 10),
    ]
    assert [f["index"] for f in frames.user_stack(stack, 1)] == [0]
