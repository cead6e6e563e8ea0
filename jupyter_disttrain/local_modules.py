"""Modules of the user's own (a ``mymodels.py`` beside the notebook) that must travel with a cell.

A module is *local* when its file is neither in the standard library nor in
an installed distribution's directory (site-packages): the workers cannot be
expected to have it. The cell can use one directly (``import mymodels``, a
captured module), through a name it imports in its text (``from mymodels
import Net``), or through a captured object pickled by reference to it (an
instance of ``mymodels.Net``). Each such module, or the whole package it
belongs to, is shipped as source files inside the payload; workers put them
on ``sys.path`` before anything is unpickled.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import pickletools
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

#: Largest total size of local module files shipped with one cell.
MAX_MODULE_BYTES: Final = 4 * 1024 * 1024
#: Packages that are the tool's own (the runtime ships itself separately) or always present.
_NEVER: Final = frozenset({"jupyter_disttrain", "cloudpickle", "__main__", "builtins"})


class ModuleTooLarge(ValueError):
    """A local module is too big to travel with the cell; the message names the fix."""


def _too_large(name: str, root: Path, size: int, what: str) -> ModuleTooLarge:
    return ModuleTooLarge(
        f"local module {name!r} ({root}) is too big to travel with the {what} "
        f"({size / 2**20:.1f} MiB of source, limit {MAX_MODULE_BYTES // 2**20} MiB): "
        "make it an installable package and install it on the workers (--pip, or the "
        "image), or keep data files out of its directory"
    )


def _module_files(root: Path) -> dict[str, bytes]:
    """The source files of module file or package directory ``root``, relative to its parent."""
    if not root.is_dir():
        return {root.name: root.read_bytes()}
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            files[str(path.relative_to(root.parent))] = path.read_bytes()
    return files


def _system_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs.update(p for p in sys.path if "site-packages" in p or "dist-packages" in p)
    return [os.path.realpath(d) for d in dirs if d]


def local_root(name: str) -> Path | None:
    """Where top-level module ``name`` lives if it is local: its file or package directory."""
    if name in _NEVER or name in sys.builtin_module_names:
        return None
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            return None
        origin = spec.origin
    path = Path(os.path.realpath(origin))
    if path.suffix not in (".py", ".pyc"):
        return None  # extension modules are built for one machine
    if any(str(path).startswith(d + os.sep) for d in _system_dirs()):
        return None
    return path.parent if path.name == "__init__.py" else path


def names_in_source(source: str) -> set[str]:
    """Top-level module names the cell's text imports."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def names_in_pickle(blob: bytes) -> set[str]:
    """Top-level module names a pickle refers to (objects pickled by reference)."""
    out: set[str] = set()
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(blob):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                strings.append(str(arg))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                out.add(strings[-2].split(".")[0])
            elif op.name in ("GLOBAL", "INST") and isinstance(arg, str):
                out.add(arg.split(" ")[0].split(".")[0])
    except Exception:  # a pickle this reader does not follow: nothing found in it
        return out
    return out


def package_versions(names: Iterable[str]) -> dict[str, list[str]]:
    """Installed third-party packages among top-level import ``names``: name -> [dist, version].

    Standard-library, local and unknown modules are left out.
    """
    import importlib.metadata

    stdlib = set(sys.stdlib_module_names)
    wanted = sorted(n for n in set(names) if n not in stdlib and n not in _NEVER)
    if not wanted:
        return {}
    dists = _distributions()
    out: dict[str, list[str]] = {}
    for name in wanted:
        if name not in dists:
            continue
        dist = dists[name][0]
        try:
            out[name] = [dist, importlib.metadata.version(dist)]
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


_dists_cache: tuple[tuple[tuple[str, int], ...], Mapping[str, list[str]]] | None = None


def _distributions() -> Mapping[str, list[str]]:
    """``importlib.metadata.packages_distributions()``, cached.

    Read again only when ``sys.path`` or one of its directories changed (an
    install): reading it takes about half a second.
    """
    import importlib.metadata

    global _dists_cache
    key = []
    for entry in sys.path:
        try:
            key.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            key.append((entry, 0))
    stamp = tuple(key)
    if _dists_cache is None or _dists_cache[0] != stamp:
        _dists_cache = (stamp, importlib.metadata.packages_distributions())
    return _dists_cache[1]


def collect(names: Iterable[str]) -> dict[str, dict[str, bytes]]:
    """For each local top-level module among ``names``: its files (path relative to sys.path).

    Raises :class:`ModuleTooLarge` when they exceed :data:`MAX_MODULE_BYTES`.
    """
    out: dict[str, dict[str, bytes]] = {}
    total = 0
    for name in sorted(set(names)):
        root = local_root(name)
        if root is None:
            continue
        files = _module_files(root)
        size = sum(len(b) for b in files.values())
        total += size
        if total > MAX_MODULE_BYTES:
            raise _too_large(name, root, size, "cell")
        out[name] = files
    return out


def find_in(name: str, folders: Iterable[Path]) -> Path | None:
    """Top-level module ``name`` as the first of ``folders`` on ``sys.path`` would find it.

    Its ``NAME.py`` file or package directory (with ``__init__.py``, or a
    namespace package holding ``.py`` files); None when no folder has it.
    """
    for folder in folders:
        package = folder / name
        if package.is_dir() and ((package / "__init__.py").is_file() or any(package.glob("*.py"))):
            return package
        if (folder / f"{name}.py").is_file():
            return folder / f"{name}.py"
    return None


def project_modules(
    sources: Iterable[bytes | str], folders: Sequence[Path], names: Iterable[str] = ()
) -> dict[str, dict[str, bytes]]:
    """The user's own modules a script needs: the top-level modules ``names`` and those its
    ``sources`` import, and (transitively) the modules those import, found in ``folders``
    (the script's folder, then ``PYTHONPATH``'s; folders in the standard library or
    site-packages are not searched).

    Name -> its files relative to the folder it is in. Installed and unknown modules are
    left out. Raises :class:`ModuleTooLarge` past :data:`MAX_MODULE_BYTES` in all.
    """
    system = _system_dirs()
    searched = [f for f in folders if not _under(str(f.resolve()), system)]
    pending = set(names).union(*(names_in_source(_text(s)) for s in sources))
    seen: set[str] = set()
    out: dict[str, dict[str, bytes]] = {}
    total = 0
    while pending:
        name = pending.pop()
        seen.add(name)
        root = None if name in _NEVER else find_in(name, searched)
        if root is None:
            continue
        files = _module_files(root)
        size = sum(len(b) for b in files.values())
        total += size
        if total > MAX_MODULE_BYTES:
            raise _too_large(name, root, size, "script")
        out[name] = files
        for data in files.values():
            pending |= names_in_source(_text(data)) - seen
    return dict(sorted(out.items()))


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


def _text(source: bytes | str) -> str:
    return source.decode("utf-8", "replace") if isinstance(source, bytes) else source
