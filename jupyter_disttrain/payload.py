"""Cell source + the notebook globals it references -> the bytes every worker runs.

The cell's free names are found with :mod:`symtable` (real scoping, so a
name a function only uses locally is not captured). Each referenced value
from the notebook namespace is pickled on its own with cloudpickle (by value
for ``__main__`` objects, by reference for importable ones), which lets a
failure or an oversized value be named. Installed modules travel as
``import`` by name; the user's own modules (see :mod:`.local_modules`) travel
as source files.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import pickle
import platform
import shlex
import symtable
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from .frameworks import framework as framework_of
from .local_modules import (
    ModuleTooLarge,
    collect,
    find_in,
    names_in_pickle,
    names_in_source,
    package_versions,
    project_modules,
)
from .plugins import DEFAULT_FRAMEWORK
from .runtime import jobkey
from .units import format_bytes

PAYLOAD_FORMAT = 1
DEFAULT_MAX_CAPTURE_BYTES = 64 * 1024 * 1024

#: Names IPython puts in the user namespace that a cell never means to ship.
IPYTHON_NAMES = frozenset(
    {
        "In",
        "Out",
        "get_ipython",
        "exit",
        "quit",
        "_",
        "__",
        "___",
        "_ih",
        "_oh",
        "_dh",
        "_i",
        "_ii",
        "_iii",
    }
)

_ADVICE = {
    "generator": "a generator cannot be copied to another process; create it inside the cell",
    "lock": "a lock only works inside one process; create it inside the cell",
    "file": "an open file cannot be shipped; open it inside the cell",
    "socket": "an open socket cannot be shipped; connect inside the cell",
    "ProcessGroup": "a live process group cannot be shipped; the cell already runs in one "
    "(use torch.distributed directly)",
    "Thread": "a thread cannot be shipped; start it inside the cell",
    "Process": "a running process cannot be shipped; start it inside the cell",
}


class CaptureError(ValueError):
    """The cell cannot be shipped as it is; the message names the cause and the fix."""


@dataclass(frozen=True)
class Capture:
    """One name the cell takes from the notebook."""

    name: str
    captured_as: str  # "value", "module" or "local module" (its source files travel)
    type_name: str
    size: int  # pickled bytes (0 for modules)
    module: str = ""


@dataclass(frozen=True)
class ScriptInfo:
    """The training script a payload runs (see :func:`build_script_payload`).

    ``command`` is what followed the options: ``(PATH, *ARGS)`` or ``("-m", MODULE, *ARGS)``.
    """

    command: tuple[str, ...]
    size: int  # bytes of the script's source

    def describe(self, modules: str, payload_bytes: int) -> str:
        """``script train.py 2 1 (1.0 KB); ships datautils (local module, 1.2 KB); ...``."""
        head = f"script {shlex.join(self.command)} ({format_bytes(self.size)})"
        if not modules:
            return f"{head}; ships the script only ({format_bytes(payload_bytes)})"
        return f"{head}; ships {modules}; payload {format_bytes(payload_bytes)}"


@dataclass(frozen=True)
class Payload:
    """What every worker runs: pickled bytes plus a description for the user."""

    data: bytes
    source: str
    captures: tuple[Capture, ...]
    python: str
    #: The notebook's version of the framework's package (``None``: not installed here).
    framework_version: str | None
    #: The job's secret (see :mod:`.runtime.jobkey`): travels beside the payload, never in it.
    key: bytes = field(default_factory=jobkey.new_key, repr=False)
    #: Set when the payload runs a training script (:func:`build_script_payload`), not a cell.
    script: ScriptInfo | None = None
    #: The top-level packages its code imports (the user's own modules not among them).
    packages: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line listing what is shipped, with sizes."""
        if self.script is not None:
            return self.script.describe(self.captures_text(), len(self.data))
        if not self.captures:
            return f"ships the cell only ({format_bytes(len(self.data))})"
        return f"captures {self.captures_text()}; payload {format_bytes(len(self.data))}"

    def captures_text(self) -> str:
        """The captures as ``name (how captured, size)``, comma-separated."""
        parts = []
        for cap in self.captures:
            if cap.captured_as == "local module":
                parts.append(f"{cap.name} (local module, {format_bytes(cap.size)})")
            elif cap.captured_as == "module":
                parts.append(f"{cap.name} (import {cap.module})")
            else:
                parts.append(f"{cap.name} ({cap.type_name}, {format_bytes(cap.size)})")
        return ", ".join(parts)


def transform_cell(cell: str) -> str:
    """IPython syntax -> Python; reject what cannot run outside IPython."""
    from IPython.core.inputtransformer2 import TransformerManager

    source = TransformerManager().transform_cell(cell)
    if "get_ipython()" in source and "get_ipython()" not in cell:
        raise CaptureError(
            "the cell uses IPython magics or shell commands (%... or !...), which do not exist "
            "on the workers; run them in another cell or use plain Python (e.g. subprocess)"
        )
    try:
        tree = ast.parse(source, "<distrain-cell>", "exec")
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        raise CaptureError(
            f"the cell has a syntax error on line {exc.lineno}: {exc.msg}"
            + (f" ({line!r})" if line else "")
        ) from None
    if not tree.body:
        raise CaptureError(
            "the %%distrain cell has no code; write the training code below the magic line"
        )
    return source


def free_names(source: str) -> list[str]:
    """Global names the code reads but does not bind itself, in first-seen order."""
    top = symtable.symtable(source, "<distrain-cell>", "exec")
    seen: dict[str, None] = {}

    def visit(table: symtable.SymbolTable) -> None:
        for sym in table.get_symbols():
            name = sym.get_name()
            if table is top:
                if sym.is_referenced() and not sym.is_assigned() and not sym.is_imported():
                    seen.setdefault(name, None)
            elif sym.is_global() and sym.is_referenced() and not _bound_at_top(top, name):
                seen.setdefault(name, None)
        for child in table.get_children():
            visit(child)

    visit(top)
    return list(seen)


def _bound_at_top(top: symtable.SymbolTable, name: str) -> bool:
    try:
        sym = top.lookup(name)
    except KeyError:
        return False
    return sym.is_assigned() or sym.is_imported() or sym.is_namespace()


def _skip(name: str, value: Any) -> bool:
    if name in IPYTHON_NAMES:
        return True
    if name.startswith("_") and name[1:].lstrip("i").isdigit():
        return True  # _5, _i5: IPython output/input history
    return False


def _reason(name: str, value: Any, exc: BaseException) -> str:
    tname = type(value).__name__
    for key, advice in _ADVICE.items():
        if key.lower() in tname.lower() or key.lower() in str(exc).lower():
            return f"{name!r} ({tname}) cannot be sent to the workers: {advice}"
    return (
        f"{name!r} ({tname}) cannot be sent to the workers: {exc}; "
        "create it inside the cell instead"
    )


def package_version(name: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_payload(
    cell: str,
    namespace: dict[str, Any],
    *,
    job: str,
    framework: str = DEFAULT_FRAMEWORK,
    dist_backend: str = "auto",
    max_capture_bytes: int = DEFAULT_MAX_CAPTURE_BYTES,
    extra: dict[str, Any] | None = None,
) -> Payload:
    """Serialise ``cell`` with what it uses from ``namespace``.

    Raises :class:`CaptureError` when the cell is empty or invalid, a
    referenced value cannot be pickled (naming it and why), or the captures
    exceed ``max_capture_bytes``.
    """
    source = transform_cell(cell)
    globals_: dict[str, bytes] = {}
    imports: dict[str, str] = {}
    captures: list[Capture] = []
    for name in free_names(source):
        if name not in namespace or _skip(name, namespace[name]):
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            if value.__name__ == "__main__":
                continue
            imports[name] = value.__name__
            captures.append(Capture(name, "module", "module", 0, value.__name__))
            continue
        try:
            blob = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise CaptureError(_reason(name, value, exc)) from None
        globals_[name] = blob
        captures.append(Capture(name, "value", type(value).__name__, len(blob)))
    total = sum(len(b) for b in globals_.values())
    if total > max_capture_bytes:
        biggest = sorted(captures, key=lambda c: -c.size)[:3]
        listing = ", ".join(f"{c.name} ({format_bytes(c.size)})" for c in biggest)
        raise CaptureError(
            f"the cell captures {format_bytes(total)} of notebook data, over the "
            f"{format_bytes(max_capture_bytes)} limit (largest: {listing}); load large data "
            "inside the cell (from a file or dataset), or raise the limit with "
            "%distrain_config max_capture_mb=N"
        )
    wanted = {module.split(".")[0] for module in imports.values()} | names_in_source(source)
    for blob in globals_.values():
        wanted |= names_in_pickle(blob)
    try:
        modules = collect(wanted)
    except ModuleTooLarge as exc:
        raise CaptureError(str(exc)) from None
    for name, files in modules.items():
        size = sum(len(b) for b in files.values())
        captures.append(Capture(name, "local module", "module", size, name))
    packages = package_versions(wanted - set(modules))
    python = platform.python_version()
    fw = framework_of(framework)
    envelope = {
        "format": PAYLOAD_FORMAT,
        "job": job,
        "source": source,
        "globals": globals_,
        "imports": imports,
        "python": python,
        "framework": framework,
        # what the framework has its workers told: runtime set-up, packages reported (see base.py)
        **fw.payload_fields(),
        "dist_backend": dist_backend,
        # third-party packages the cell uses: import name -> [distribution, version]
        "packages": packages,
        # the user's own modules, as source files relative to a sys.path entry
        "modules": {path: data for files in modules.values() for path, data in files.items()},
        **(extra or {}),
    }
    data = pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)
    imported = tuple(sorted(wanted - set(modules)))
    return Payload(data, source, tuple(captures), python, fw.notebook_version(), packages=imported)


# --- training scripts ------------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """A training script as ``torchrun`` takes it: ``PATH ARGS``, or ``-m MODULE ARGS``.

    ``target`` is the path as the user named it (relative to ``cwd``, the folder the
    command ran in) or, with ``module``, the module's dotted name.
    """

    target: str
    args: tuple[str, ...] = ()
    module: bool = False
    cwd: str = "."


def _pythonpath() -> list[Path]:
    return [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _module_file(name: str, folders: list[str]) -> Path | None:
    """The file ``python -m name`` runs, searching ``folders`` (nothing is imported)."""
    import importlib.machinery

    search: list[str] | None = folders
    spec = None
    parts = name.split(".")
    for index, part in enumerate(parts):
        if not part.isidentifier():
            return None
        spec = importlib.machinery.PathFinder.find_spec(part, search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
        if not search and index < len(parts) - 1:
            return None  # a module, not a package: it has no submodules
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.machinery.PathFinder.find_spec("__main__", search)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _read_source(path: Path, shown: str) -> tuple[bytes, str]:
    """The file's bytes and its text (PEP 263 encoding); raise :class:`CaptureError`."""
    import importlib.util

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureError(f"cannot read {shown}: {exc.strerror or exc}") from None
    try:
        text = importlib.util.decode_source(data)
        ast.parse(text, str(path), "exec")
    except SyntaxError as exc:
        line = (exc.text or "").strip()
        raise CaptureError(
            f"{shown} has a syntax error on line {exc.lineno}: {exc.msg}"
            + (f" ({line!r})" if line else "")
        ) from None
    except (UnicodeDecodeError, LookupError) as exc:
        raise CaptureError(f"cannot read {shown}: {exc}") from None
    return data, text


def build_script_payload(
    script: Script,
    *,
    job: str,
    framework: str = DEFAULT_FRAMEWORK,
    dist_backend: str = "auto",
    extra: dict[str, Any] | None = None,
) -> Payload:
    """A payload that runs ``script`` in every rank as ``torchrun`` would.

    The script's folder is its project (the current folder for ``-m``): the modules
    and packages of it (or of ``PYTHONPATH``) that it imports, transitively, travel
    with it; installed packages are recorded for the workers' pre-flight. Raises
    :class:`CaptureError` when the script cannot be read or parsed, the module is not
    found, or its modules are too big to travel (:data:`.local_modules.MAX_MODULE_BYTES`).
    """
    cwd = os.path.abspath(script.cwd)
    extra_path = _pythonpath()
    names: list[str] = []
    if script.module:
        found = _module_file(script.target, [cwd, *map(str, extra_path), *sys.path])
        if found is None:
            raise CaptureError(
                f"no module named {script.target!r} here: -m runs a module found from the "
                f"current folder ({cwd}) or installed; run disttrain from the folder that "
                f"holds {script.target.split('.')[0]}/, or give the script's path"
            )
        data, source = _read_source(found, script.target)
        top = script.target.split(".")[0]
        root, file, argv0 = cwd, str(found), str(found)
        home = find_in(top, [Path(cwd), *extra_path])
        name = str(found.relative_to(home.parent)) if home and found.is_relative_to(home) else ""
        if name:
            names.append(top)
        command = ("-m", script.target, *script.args)
    else:
        file = os.path.join(cwd, script.target)  # python's __file__: joined, not normalised
        data, source = _read_source(Path(file), script.target)
        root, argv0 = os.path.dirname(os.path.realpath(file)), script.target
        name = os.path.basename(file)
        command = (script.target, *script.args)
    try:
        modules = project_modules([source], [Path(root), *extra_path], names)
    except ModuleTooLarge as exc:
        raise CaptureError(str(exc)) from None
    files = {path: blob for found_files in modules.values() for path, blob in found_files.items()}
    if not script.module:
        files[name] = data
    wanted = {script.target.split(".")[0]} if script.module else set()
    for text in [source, *(b.decode("utf-8", "replace") for b in files.values())]:
        wanted |= names_in_source(text)
    captures = tuple(
        Capture(mod, "local module", "module", sum(len(b) for b in f.values()), mod)
        for mod, f in modules.items()
    )
    python, fw = platform.python_version(), framework_of(framework)
    envelope = {
        "format": PAYLOAD_FORMAT,
        "job": job,
        "source": source,
        "globals": {},
        "imports": {},
        "python": python,
        "framework": framework,
        **fw.payload_fields(),
        "dist_backend": dist_backend,
        "packages": package_versions(wanted - set(modules)),
        "modules": {},
        # how the worker runs it (see runtime/cell.py: run_script)
        "script": {
            "argv": [argv0, *script.args],  # sys.argv on this machine
            "file": file,  # __file__ on this machine
            "root": root,  # sys.path[0] on this machine
            "module": script.target if script.module else None,
            "name": name,  # the script's path in the shipped folder ("" : an installed module)
            "files": files,  # the shipped folder: the script and its modules
        },
        **(extra or {}),
    }
    blob = pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)
    info = ScriptInfo(command, len(data))
    imported = tuple(sorted(wanted - set(modules)))
    return Payload(
        blob, source, captures, python, fw.notebook_version(), script=info, packages=imported
    )
