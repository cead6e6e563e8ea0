"""Run a cell's source like IPython does: statements, then the last expression's value."""

from __future__ import annotations

import ast
import linecache
import sys
import types
from typing import Any

CELL_FILENAME = "<distrain-cell>"


def register_source(source: str, filename: str = CELL_FILENAME) -> None:
    """Make tracebacks through the cell show its source lines."""
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)


def main_module(namespace: dict[str, Any]) -> types.ModuleType:
    """A fresh ``__main__`` module whose dict is ``namespace``.

    Classes and functions the cell defines then belong to ``__main__``, as in
    the notebook, so cloudpickle ships them back by value.
    """
    module = types.ModuleType("__main__")
    module.__dict__.update(namespace)
    module.__dict__.setdefault("__builtins__", __builtins__)
    sys.modules["__main__"] = module
    return module


def run_cell(source: str, namespace: dict[str, Any], filename: str = CELL_FILENAME) -> Any:
    """Execute ``source`` in ``namespace``; return the last expression's value or None.

    ``sys.exit()``, ``sys.exit(0)`` and ``sys.exit(None)`` end the cell as a
    success with no value, as they end a script; any other ``SystemExit``
    (``sys.exit(1)``, ``sys.exit("message")``) propagates as the cell's failure.
    """
    register_source(source, filename)
    tree = ast.parse(source, filename=filename, mode="exec")
    last: ast.expr | None = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1].value
        tree.body.pop()
    try:
        exec(compile(tree, filename, "exec"), namespace)
        if last is None:
            return None
        return eval(compile(ast.Expression(last), filename, "eval"), namespace)
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            return None
        raise
