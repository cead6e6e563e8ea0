"""Backends by name: entry points of group ``jupyter_disttrain.backends`` (imported on first use).

The built-ins are declared in ``pyproject.toml``; another distribution adds
a backend with an entry point of its own (``name = "module:Class"``), and
:func:`register` adds one in-process.
"""

from __future__ import annotations

from typing import Any

from ..plugins import BACKENDS, UnknownPlugin
from .base import Backend, BackendError


def names() -> tuple[str, ...]:
    """Every backend name, the default (``local``) first."""
    return BACKENDS.names()


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; :class:`BackendError` naming the known ones otherwise."""
    try:
        cls = BACKENDS.load(name)
    except UnknownPlugin:
        raise BackendError(f"unknown backend {name!r}; available: {', '.join(names())}") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(f"backend {name!r} is registered as {cls!r}, which is not a Backend")
    return cls


def get_backend(name: str, **config: Any) -> Backend:
    """A new instance of backend ``name`` configured with ``config`` (see ``Backend.create``)."""
    return backend_class(name).create(**config)


def register(name: str, cls: type[Backend] | str) -> None:
    """Register backend ``cls`` (or ``"module:Class"``) as ``name`` in this process."""
    BACKENDS.register(name, cls)


def unregister(name: str) -> None:
    """Forget an in-process registration (the entry points stay)."""
    BACKENDS.unregister(name)
