"""Autolog: the training libraries a cell uses report to the job with no code change.

One module per library (``lightning``, ``hf``, ``keras``, ``accelerate``), each
holding an :class:`Integration`: the modules whose import attaches it, the
library versions it knows, and ``attach(module)``, which adds the library's
own callback (or wraps one method) so that metrics, progress and
checkpoints go where ``report()`` and ``save_checkpoint()`` send theirs.

Integrations are found as entry points of the group
``jupyter_disttrain.integrations`` (``name = "module:ATTRIBUTE"``; the
built-ins are declared in ``pyproject.toml``, another distribution adds its
own), plus :data:`BUILTIN` for pods that got the runtime as files, without
the package's metadata. ``DISTRAIN_AUTOLOG`` (``--no-autolog``,
``--autolog lightning,hf``, ``%distrain_config autolog=0``) chooses them:
unset or ``all`` for every one, ``0``/``off`` for none, else names.

Nothing is imported ahead of the cell: :func:`install` puts one finder on
``sys.meta_path`` that attaches an integration right after its library's
module is imported (or at once when it already is). A library version an
integration does not know, or an integration that fails to attach, gives
one warning on stderr and the job runs without it: autolog never fails a job.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

ENV = "DISTRAIN_AUTOLOG"
GROUP = "jupyter_disttrain.integrations"
#: The built-in integrations (also entry points): found without the package's metadata too.
BUILTIN: dict[str, str] = {
    "lightning": f"{__name__}.lightning:INTEGRATION",
    "hf": f"{__name__}.hf:INTEGRATION",
    "keras": f"{__name__}.keras:INTEGRATION",
    "accelerate": f"{__name__}.accelerate:INTEGRATION",
}
OFF = ("0", "off", "false", "no", "none")


@dataclass(frozen=True)
class Integration:
    """One library's autolog: what to watch, which versions, how to attach.

    ``attach(module)`` is called once for each module of ``watches`` when it
    is imported (two packages of one library: ``lightning.pytorch`` and
    ``pytorch_lightning``); the version is the ``__version__`` of that module's top-level
    package, known when ``oldest <= version < below`` (major, minor).
    """

    name: str
    library: str
    watches: tuple[str, ...]
    oldest: tuple[int, int]
    below: tuple[int, int]
    attach: Callable[[ModuleType], None]
    #: Text in a cell (or its captured code) that says it may use the library.
    mentions: tuple[str, ...] = field(default=())
    #: Modules of the library a warm launcher may import once for a job that imports it,
    #: before forking the job's processes (:mod:`..warm`): each must start no thread.
    warm: tuple[str, ...] = field(default=())


_lock = threading.Lock()
_active: dict[str, Integration] = {}
_waiting: dict[str, list[Integration]] = {}
_attached: set[tuple[str, str]] = set()
_warned: set[str] = set()
_installed = False


def chosen(value: str | None) -> set[str] | None:
    """The names ``DISTRAIN_AUTOLOG`` asks for: ``None`` for all, an empty set for none."""
    text = (value or "").strip().lower()
    if text in ("", "all", "1", "on", "true", "yes"):
        return None
    if text in OFF:
        return set()
    return {part.strip() for part in text.split(",") if part.strip()}


def active(name: str) -> bool:
    """Whether integration ``name`` is installed in this worker (False outside one)."""
    return name in _active


@functools.lru_cache(maxsize=1)
def targets() -> dict[str, str]:
    """Every integration's ``module:attribute`` by name: entry points over the built-ins.

    Read once a process (a scan of every installed distribution, about 0.1 s);
    the warm launcher reads it before it forks workers.
    """
    found = dict(BUILTIN)
    try:
        from importlib import metadata

        for point in metadata.entry_points().select(group=GROUP):
            found[point.name] = point.value
    except Exception:
        pass  # no metadata here (a pod's runtime files): the built-ins
    return found


def load(target: str) -> Integration:
    """The :class:`Integration` at ``target`` (``module:ATTRIBUTE``); ``TypeError`` for
    anything else, the import's own exception when it cannot be imported."""
    module, _, attribute = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, Integration):
        raise TypeError(f"{target} is not an Integration")
    return obj


def install(env: dict[str, str] | None = None) -> list[str]:
    """Install the integrations the environment asks for; return their names (idempotent)."""
    global _installed
    wanted = chosen((env if env is not None else os.environ).get(ENV))
    for name, target in sorted(targets().items()):
        if (wanted is not None and name not in wanted) or name in _active:
            continue
        try:
            integration = load(target)
        except Exception as exc:
            warn(
                name,
                f"autolog: the {name} integration ({target}) cannot be loaded: {exc!r}; "
                "the job runs without it",
            )
            continue
        with _lock:
            _active[name] = integration
            for module in integration.watches:
                _waiting.setdefault(module, []).append(integration)
    with _lock:
        if not _installed and _active:
            sys.meta_path.insert(0, _Finder())
            _installed = True
    for module in list(_waiting):
        if module in sys.modules:
            _imported(module, sys.modules[module])
    return sorted(_active)


def mentioned(names: Sequence[str], source: str, blobs: Sequence[bytes]) -> bool:
    """Whether the cell (or code it captured) mentions any active integration of ``names``."""
    words = [w for n in names if n in _active for w in _active[n].mentions]
    return any(w in source or any(w.encode() in b for b in blobs) for w in words)


def warn(key: str, message: str) -> None:
    """Print ``message`` to stderr once per ``key`` in this process."""
    if key in _warned:
        return
    _warned.add(key)
    print(f"distrain: warning: {message}", file=sys.stderr, flush=True)


def version_of(module: ModuleType) -> str:
    """The ``__version__`` of ``module``'s top-level package ('' when it has none)."""
    top = sys.modules.get(module.__name__.split(".")[0], module)
    return str(getattr(top, "__version__", "") or "")


def known(version: str, oldest: tuple[int, int], below: tuple[int, int]) -> bool:
    """Whether ``version`` (``"4.57.1"``, ``"2.6.0rc1"``) is in ``[oldest, below)``."""
    match = re.match(r"^\s*(\d+)\.(\d+)", version)
    if match is None:
        return False
    pair = (int(match.group(1)), int(match.group(2)))
    return oldest <= pair < below


def _imported(name: str, module: ModuleType) -> None:
    """Module ``name`` was imported: attach the integrations waiting for it (once each)."""
    with _lock:
        waiting = _waiting.pop(name, [])
        todo = [i for i in waiting if (i.name, name) not in _attached]
        _attached.update((i.name, name) for i in todo)
    for integration in todo:
        attach(integration, module)


def attach(integration: Integration, module: ModuleType) -> bool:
    """Attach ``integration`` to its imported ``module``; a warning instead of any failure."""
    version = version_of(module)
    if not known(version, integration.oldest, integration.below):
        span = f"{'.'.join(map(str, integration.oldest))} to below " + ".".join(
            map(str, integration.below)
        )
        warn(
            integration.name,
            f"autolog: {integration.library} {version or '(no version)'} "
            f"is not a version the {integration.name} integration knows ({span}); the job "
            f"runs without it (--autolog without {integration.name}, or --no-autolog, "
            "silences this)",
        )
        return False
    try:
        integration.attach(module)
    except Exception as exc:
        warn(
            integration.name,
            f"autolog: the {integration.name} integration could not attach "
            f"to {integration.library} {version}: {exc!r}; the job runs without it",
        )
        return False
    return True


class _Loader(importlib.abc.Loader):
    """The real loader of a watched module, then the integrations' attach."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None:  # the module keeps its own loader once loaded
            spec.loader = self.inner
        module.__loader__ = self.inner
        self.inner.exec_module(module)
        _imported(self.name, module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of a watched module another finder found."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return None
            spec.loader = _Loader(loader, fullname)
            return spec
        return None
