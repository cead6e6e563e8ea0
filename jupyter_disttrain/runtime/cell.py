"""Run what a payload carries: a cell like IPython does, or a training script like ``python``.

A cell: statements, then the last expression's value. A script (see
:func:`run_script`): ``sys.argv``, ``__file__``, ``__name__``, ``sys.path[0]``
and tracebacks as ``python script.py ARGS`` (or ``python -m MODULE ARGS``)
gives them under ``torchrun``.
"""

from __future__ import annotations

import ast
import importlib
import linecache
import os
import sys
import tempfile
import types
from collections.abc import Mapping
from importlib.machinery import SourceFileLoader
from types import TracebackType
from typing import Any

from . import debugger

CELL_FILENAME = "<distrain-cell>"
#: Set in pods: the writable folder a script's shipped copy is written to and runs in.
SCRIPT_DIR_ENV = "DISTRAIN_SCRIPT_DIR"

_running = {"file": CELL_FILENAME}
_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from the user's code on: the runtime's (and runpy's) frames that led to the
    cell or script are left out, as ``python`` shows a script's; ``tb`` when all are ours."""
    first = tb
    while first is not None and (
        first.tb_frame.f_code.co_filename.startswith(_RUNTIME_DIR)
        or first.tb_frame.f_code.co_filename in ("<frozen runpy>", runpy_file())
    ):
        first = first.tb_next
    return first or tb


def runpy_file() -> str:
    """Where :mod:`runpy` runs from when it is not frozen."""
    import runpy

    return str(getattr(runpy, "__file__", "") or "<frozen runpy>")


def code_filename() -> str:
    """The file name the user's code runs under: the cell's, or the running script's path."""
    return _running["file"]


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
    _running["file"] = filename  # the user's code, for stacks and pauses (a session's cell N)
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


def run_payload(payload: Mapping[str, Any], namespace: dict[str, Any]) -> Any:
    """Run the payload's script, or its cell; return the cell's value (a script's is None).

    A cell's ``breakpoints`` (``[{"line", "condition"}]``, the Debugger panel's) stop it
    there (:func:`.debugger.arm`); without any nothing is traced."""
    script = payload.get("script")
    if script:
        return run_script(script, str(payload["source"]), namespace)
    source = str(payload["source"])
    register_source(source)  # the breakpoints' lines must exist before they are set
    debugger.arm(list(payload.get("breakpoints") or []), CELL_FILENAME)
    try:
        return run_cell(source, namespace, CELL_FILENAME)
    finally:
        debugger.disarm(debugger.armed())  # armed at the start, or by breakpoints set since


def write_folder(folder: str, files: Mapping[str, bytes]) -> None:
    """Write the shipped ``files`` (paths relative to ``folder``) atomically.

    Every rank of a pod writes the same files: each replaces a whole file, so a
    rank that already imports one reads a complete copy.
    """
    root = os.path.realpath(folder)
    for relative, data in files.items():
        target = os.path.realpath(os.path.join(root, relative))
        if not target.startswith(root + os.sep):
            raise ValueError(f"the payload names a file outside its folder: {relative!r}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".distrain-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)


def run_script(script: Mapping[str, Any], source: str, namespace: dict[str, Any]) -> None:
    """Run a training script in ``namespace`` (this rank's ``__main__``) as ``python`` would.

    ``script`` is the payload's description (``argv``, ``file``, ``root``, ``module``,
    ``name``, ``files``; see ``payload.build_script_payload``). On the machine that
    submitted it (locally) the script runs where it is: ``sys.argv[0]`` as the user
    named it, ``__file__`` its absolute path, its folder (the current folder for
    ``-m``) first on ``sys.path``, the working directory left as it is. With
    :data:`SCRIPT_DIR_ENV` set (pods), its shipped copy is written to that folder and
    runs there, which becomes the working directory. ``sys.exit(0)`` is success.
    """
    argv, file, root = list(script["argv"]), str(script["file"]), str(script["root"])
    module = script.get("module")
    home = os.environ.get(SCRIPT_DIR_ENV)
    if home:
        write_folder(home, script.get("files") or {})
        os.chdir(home)
        root = os.path.realpath(home)
        if script.get("name"):
            file = argv[0] = os.path.join(root, str(script["name"]))
    if not sys.flags.safe_path:  # python puts the script's folder where the launcher's was
        if sys.path:
            sys.path[0] = root
        else:
            sys.path.append(root)
    importlib.invalidate_caches()
    sys.argv = argv
    _running["file"] = file
    try:
        if module:
            _run_module(str(module), namespace)
        else:
            namespace.update(
                __file__=file,
                __cached__=None,
                __spec__=None,
                __package__=None,
                __loader__=SourceFileLoader("__main__", file),
            )
            register_source(source, file)
            exec(compile(source, file, "exec", dont_inherit=True), namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    return None


def _run_module(name: str, namespace: dict[str, Any]) -> None:
    """``python -m name``: the module (a package's ``__main__``) runs as ``__main__``."""
    import runpy

    names = {k: v for k, v in namespace.items() if not k.startswith("__")}
    runpy.run_module(name, init_globals=names, run_name="__main__", alter_sys=True)
