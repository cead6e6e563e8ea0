"""Backend lookup by name."""

from __future__ import annotations

from .base import Backend, BackendError


def get_backend(name: str, *, launch_mode: str = "fork") -> Backend:
    """The backend called ``name``; :class:`BackendError` for an unknown one."""
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(mode=launch_mode)
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend()
    raise BackendError(f"unknown backend {name!r}; available: local, kubernetes")
