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
import pickle
import platform
import symtable
import types
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from .local_modules import (
    ModuleTooLarge,
    collect,
    names_in_pickle,
    names_in_source,
    package_versions,
)
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
    kind: str  # "value", "module" or "local module" (its source files travel)
    type_name: str
    size: int  # pickled bytes (0 for modules)
    module: str = ""


@dataclass(frozen=True)
class Payload:
    """What every worker runs: pickled bytes plus a description for the user."""

    data: bytes
    source: str
    captures: tuple[Capture, ...]
    python: str
    torch: str | None
    #: The job's secret (see :mod:`.runtime.jobkey`): travels beside the payload, never in it.
    key: bytes = field(default_factory=jobkey.new_key, repr=False)

    def describe(self) -> str:
        """One line listing what is shipped, with sizes."""
        if not self.captures:
            return f"ships the cell only ({format_bytes(len(self.data))})"
        parts = []
        for cap in self.captures:
            if cap.kind == "local module":
                parts.append(f"{cap.name} (local module, {format_bytes(cap.size)})")
            elif cap.kind == "module":
                parts.append(f"{cap.name} (import {cap.module})")
            else:
                parts.append(f"{cap.name} ({cap.type_name}, {format_bytes(cap.size)})")
        return f"captures {', '.join(parts)}; payload {format_bytes(len(self.data))}"


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
    framework: str = "pytorch",
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
    torch_version = package_version("torch")
    envelope = {
        "format": PAYLOAD_FORMAT,
        "job": job,
        "source": source,
        "globals": globals_,
        "imports": imports,
        "python": python,
        "torch": torch_version,
        "framework": framework,
        "dist_backend": dist_backend,
        # third-party packages the cell uses: import name -> [distribution, version]
        "packages": packages,
        # the user's own modules, as source files relative to a sys.path entry
        "modules": {path: data for files in modules.values() for path, data in files.items()},
        **(extra or {}),
    }
    data = pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)
    return Payload(data, source, tuple(captures), python, torch_version)
