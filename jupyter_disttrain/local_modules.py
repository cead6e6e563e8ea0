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
import importlib.metadata
import importlib.util
import os
import pickletools
import re
import sys
import sysconfig
from collections.abc import Iterable, Sequence
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

    Standard-library, local and unknown modules are left out. Only the folders the
    modules are found in are read, and there the metadata of the distributions
    that provide them (a fresh kernel does not pay for reading every installed
    distribution's file list).
    """
    stdlib = set(sys.stdlib_module_names)
    wanted = sorted(n for n in set(names) if n not in stdlib and n not in _NEVER)
    out: dict[str, list[str]] = {}
    for name in wanted:
        found = distribution_of(name)
        if found is not None:
            out[name] = list(found)
    return out


def distribution_of(name: str) -> tuple[str, str] | None:
    """(distribution, version) of the installed distribution providing top-level module
    ``name``; None for a module that is not installed by one (local, missing, built-in).

    Looked for beside the module (the ``sys.path`` folder it is imported from): first
    a distribution of the module's own name, then every other one of that folder.
    """
    for folder in _module_folders(name):
        stamp = _mtime(folder)
        key = (name, str(folder))
        cached = _dist_cache.get(key)
        if cached is not None and cached[0] == stamp:
            if cached[1] is not None:
                return cached[1]
            continue
        found = _provider_in(folder, name)
        _dist_cache[key] = (stamp, found)
        if found is not None:
            return found
    return None


_dist_cache: dict[tuple[str, str], tuple[int, tuple[str, str] | None]] = {}


def _mtime(folder: Path) -> int:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return 0


def _module_folders(name: str) -> list[Path]:
    """The ``sys.path`` folders top-level module ``name`` is imported from (several for a
    namespace package); none when it cannot be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).parent for p in spec.submodule_search_locations]
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return [Path(spec.origin).parent]
    return []


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _provider_in(folder: Path, name: str) -> tuple[str, str] | None:
    """The distribution in ``folder`` whose files hold top-level module ``name``."""
    try:
        infos = [p for p in folder.iterdir() if p.suffix in (".dist-info", ".egg-info")]
    except OSError:
        return None
    own = _normal(name)
    infos.sort(key=lambda p: _normal(p.name.split("-")[0]) != own)
    for info in infos:
        if name in _top_level_names(info):
            dist = importlib.metadata.PathDistribution(info)
            return dist.metadata["Name"], dist.version
    return None


def _top_level_names(info: Path) -> set[str]:
    """Top-level module names a distribution's metadata folder says it installs."""
    for listed in ("top_level.txt",):
        try:
            return {line.strip() for line in (info / listed).read_text().splitlines() if line}
        except OSError:
            pass
    try:
        record = (info / "RECORD").read_text()
    except OSError:
        return set()
    out: set[str] = set()
    for line in record.splitlines():
        path = line.split(",", 1)[0]
        first, sep, _ = path.partition("/")
        if sep and first != ".." and not first.endswith((".dist-info", ".data")):
            out.add(first)
        elif not sep and path.endswith(".py"):
            out.add(path[:-3])
        elif not sep and ".cpython-" in path:
            out.add(path.split(".", 1)[0])
    return out


def collect(names: Iterable[str]) -> dict[str, dict[str, bytes]]:
    """For each local top-level module among ``names``: its files (path relative to sys.path).

    Raises :class:`ModuleTooLarge` when they exceed :data:`MAX_MODULE_BYTES`.
    """
    out: dict[str, dict[str, bytes]] = {}
    for name in sorted(set(names)):
        root = local_root(name)
        if root is not None:
            _take(out, name, root, "cell")
    return out


def _take(out: dict[str, dict[str, bytes]], name: str, root: Path, what: str) -> dict[str, bytes]:
    """Add module ``name``'s files (at ``root``) to ``out``; :class:`ModuleTooLarge` past the
    budget of all of ``out`` (``what`` ships them: ``cell`` or ``script``)."""
    files = _module_files(root)
    size = sum(len(b) for b in files.values())
    if size + sum(len(b) for f in out.values() for b in f.values()) > MAX_MODULE_BYTES:
        raise _too_large(name, root, size, what)
    out[name] = files
    return files


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
    while pending:
        name = pending.pop()
        seen.add(name)
        root = None if name in _NEVER else find_in(name, searched)
        if root is None:
            continue
        for data in _take(out, name, root, "script").values():
            pending |= names_in_source(_text(data)) - seen
    return dict(sorted(out.items()))


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


def _text(source: bytes | str) -> str:
    return source.decode("utf-8", "replace") if isinstance(source, bytes) else source
