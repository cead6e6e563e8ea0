"""Script idioms that do not belong in a ``%%distrain`` cell, found before launch.

A cell already runs on every rank with its process group initialised, so a
script's own launcher inside it (``mp.spawn`` / ``torch.multiprocessing.spawn``,
``start_processes``) would start processes inside each rank: :func:`spawn_problem`
says so and shows the call to make instead. An ``if __name__ == "__main__":``
guard is true on every rank (the cell runs as ``__main__``): :func:`main_guard_note`
says that its body runs on every rank.
"""

from __future__ import annotations

import ast
from typing import Final

#: Where a launcher of processes lives, and its functions.
_LAUNCHERS: Final = {"torch.multiprocessing": ("spawn", "start_processes")}


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source, "<distrain-cell>", "exec")
    except SyntaxError:
        return None  # the cell's own error is reported where it runs


def _launcher_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to torch.multiprocessing, names bound to its spawn functions)."""
    modules, functions = {"torch.multiprocessing"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in _LAUNCHERS and alias.asname:
                    modules.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in _LAUNCHERS:
                    modules.add(alias.asname or alias.name)
                elif node.module in _LAUNCHERS and alias.name in _LAUNCHERS[node.module]:
                    functions.add(alias.asname or alias.name)
    return modules, functions


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def spawn_problem(source: str) -> str | None:
    """What to say when the cell launches processes itself (``mp.spawn``), else None.

    The message names the line and shows the direct call: ``mp.spawn(fn,
    args=(a, b), nprocs=n)`` becomes ``fn(dist.get_rank(), a, b)``.
    """
    tree = _parse(source)
    if tree is None:
        return None
    modules, functions = _launcher_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        head, _, attr = name.rpartition(".")
        launched = (head in modules and attr in ("spawn", "start_processes")) or (
            not head and name in functions
        )
        if not launched:
            continue
        fn = ast.unparse(node.args[0]) if node.args else "your_function"
        extra = next((k.value for k in node.keywords if k.arg == "args"), None)
        if extra is None and len(node.args) > 1:
            extra = node.args[1]
        rest = ""
        if isinstance(extra, ast.Tuple | ast.List):
            rest = "".join(f", {ast.unparse(e)}" for e in extra.elts)
        elif extra is not None:
            rest = f", *{ast.unparse(extra)}"
        return (
            f"line {node.lineno}: {ast.unparse(node.func)}(...) starts processes itself, but a "
            "%%distrain cell already runs on every rank (--nodes x --nproc processes, the "
            "process group initialised), so it would start more processes inside each rank. "
            f"Call the function directly instead:\n    {fn}(dist.get_rank(){rest})\n"
            "(with import torch.distributed as dist; dist.get_world_size() is the world size)"
        )
    return None


def main_guard_note(source: str) -> str | None:
    """A note for an ``if __name__ == "__main__":`` guard in the cell, else None."""
    tree = _parse(source)
    if tree is None:
        return None
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__"
        ):
            return (
                f'warning: line {node.lineno}: `if __name__ == "__main__":` is true on every '
                "rank (the cell runs as __main__ there), so its body runs on every rank; the "
                "cell already is the per-rank program: the guard is not needed"
            )
    return None
