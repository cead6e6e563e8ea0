"""Named plugins: the backends and frameworks a job may name, found through entry points.

Each kind of plugin is a :class:`Registry` over one entry-point group
(``jupyter_disttrain.backends``, ``jupyter_disttrain.frameworks``,
``jupyter_disttrain.integrations``: the libraries autolog follows); the
package declares its built-ins there in ``pyproject.toml``, and any installed
distribution may add more. :meth:`Registry.register` adds one in-process
(tests, notebooks). Names are read from the distributions' metadata; the
object behind a name is imported on first use only, so this module stays
light enough for :mod:`~jupyter_disttrain.spec` to validate names with it.
"""

from __future__ import annotations

import importlib
import sys
from importlib import metadata
from typing import Any, Protocol

BACKEND_GROUP = "jupyter_disttrain.backends"
FRAMEWORK_GROUP = "jupyter_disttrain.frameworks"
INTEGRATION_GROUP = "jupyter_disttrain.integrations"


#: ``sys.path`` and every installed entry point on it (``importlib.metadata.entry_points()``:
#: ``SelectableGroups`` before Python 3.12, ``EntryPoints`` after; both ``select(group=)``).
_scan: tuple[tuple[str, ...], Any] | None = None


def _group(path: tuple[str, ...], group: str) -> list[metadata.EntryPoint]:
    """Entry points of ``group``: one scan of the distributions per ``sys.path``."""
    global _scan
    if _scan is None or _scan[0] != path:
        _scan = (path, metadata.entry_points())
    return list(_scan[1].select(group=group))


class UnknownPlugin(LookupError):
    """No plugin of that name; the message lists the registered names."""


class SpecRules(Protocol):
    """What :func:`~jupyter_disttrain.spec.validate` asks of a framework."""

    def check_spec(self, spec: Any) -> None:
        """Raise :class:`~jupyter_disttrain.spec.SpecError` for what this framework cannot run."""


class Registry:
    """Plugins of one kind by name: entry points of ``group`` plus in-process registrations.

    ``default`` is listed first by :meth:`names` (the others follow sorted);
    ``what`` names the kind in messages (``backend``). An in-process
    registration shadows an entry point of the same name.
    """

    def __init__(self, group: str, what: str, default: str) -> None:
        self.group = group
        self.what = what
        self.default = default
        self._registered: dict[str, Any] = {}
        self._scanned: tuple[tuple[str, ...], dict[str, metadata.EntryPoint]] | None = None
        self._loaded: dict[str, Any] = {}

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        """The group's entry points, read again whenever ``sys.path`` changed."""
        path = tuple(sys.path)
        if self._scanned is None or self._scanned[0] != path:
            found = {ep.name: ep for ep in _group(path, self.group)}
            self._scanned = (path, found)
            self._loaded.clear()
        return self._scanned[1]

    def names(self) -> tuple[str, ...]:
        """Every registered name, the default first."""
        found = set(self._entry_points()) | set(self._registered)
        if not found:
            raise UnknownPlugin(
                f"no {self.what} is registered: the entry points of group {self.group!r} are "
                "missing, so jupyter_disttrain is not installed properly; reinstall it "
                "(pip install -e . in a checkout)"
            )
        rest = sorted(found - {self.default})
        return (self.default, *rest) if self.default in found else tuple(rest)

    def known(self, name: str) -> bool:
        """Whether ``name`` is registered (an in-process registration or an entry point)."""
        return name in self._registered or name in self._entry_points()

    def load(self, name: str) -> Any:
        """The object registered as ``name``, imported now if need be.

        Raises :class:`UnknownPlugin` naming the registered ones.
        """
        if name in self._registered:
            value = self._registered[name] = _resolve(self._registered[name])
            return value
        points = self._entry_points()
        if name not in self._loaded:
            if name not in points:
                raise UnknownPlugin(
                    f"unknown {self.what} {name!r}; registered: {', '.join(self.names())}"
                )
            self._loaded[name] = points[name].load()
        return self._loaded[name]

    def register(self, name: str, target: Any) -> None:
        """Register ``target`` as ``name`` in this process.

        ``target`` is the object itself or a ``"module:attribute"`` text,
        imported on first use as an entry point's would be.
        """
        if not isinstance(name, str) or not name or name != name.strip():
            raise ValueError(f"a {self.what} name is a non-empty word, got {name!r}")
        self._registered[name] = _Lazy(target) if isinstance(target, str) else target

    def unregister(self, name: str) -> None:
        """Forget an in-process registration of ``name`` (entry points stay)."""
        self._registered.pop(name, None)

    def __repr__(self) -> str:
        return f"Registry({self.group!r})"


class _Lazy:
    """A ``"module:attribute"`` registration, resolved by :meth:`Registry.load`."""

    def __init__(self, target: str) -> None:
        module, sep, attribute = target.partition(":")
        if not sep or not module or not attribute:
            raise ValueError(f"give the object or 'module:attribute', got {target!r}")
        self.module, self.attribute = module, attribute


def _resolve(value: Any) -> Any:
    if isinstance(value, _Lazy):
        obj = importlib.import_module(value.module)
        for part in value.attribute.split("."):
            obj = getattr(obj, part)
        return obj
    return value


#: The ``--framework`` of a job that names none (the one place that names it).
DEFAULT_FRAMEWORK = "pytorch"
#: Places a job can run (:class:`~jupyter_disttrain.backends.base.Backend` classes).
BACKENDS = Registry(BACKEND_GROUP, "backend", default="local")
#: Training frameworks (:class:`~jupyter_disttrain.frameworks.base.Framework` objects).
FRAMEWORKS = Registry(FRAMEWORK_GROUP, "framework", default=DEFAULT_FRAMEWORK)
#: Training libraries autolog follows inside workers (``runtime.integrations`` objects).
INTEGRATIONS = Registry(INTEGRATION_GROUP, "autolog integration", default="lightning")
