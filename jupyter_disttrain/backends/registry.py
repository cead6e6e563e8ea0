"""Backends by name: the one place a name maps to a class (imported on first use)."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Backend, BackendError

#: Backend name -> (module, class). Adding a backend is one line here.
BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("jupyter_disttrain.backends.local", "LocalBackend"),
    "kubernetes": ("jupyter_disttrain.backends.kubernetes", "KubernetesBackend"),
}


def names() -> tuple[str, ...]:
    """Every backend name, the default (``local``) first."""
    return tuple(BACKENDS)


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; :class:`BackendError` naming the known ones otherwise."""
    try:
        module, attr = BACKENDS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}") from None
    cls: type[Backend] = getattr(importlib.import_module(module), attr)
    return cls


def get_backend(name: str, **config: Any) -> Backend:
    """A new instance of backend ``name`` configured with ``config`` (see ``Backend.create``)."""
    return backend_class(name).create(**config)
