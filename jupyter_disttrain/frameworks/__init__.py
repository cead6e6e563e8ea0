"""Training frameworks by name: what each decides about a job (see :mod:`.base`).

The built-ins (:mod:`.pytorch`, :mod:`.tensorflow`) and any other installed
distribution's frameworks are entry points of group
``jupyter_disttrain.frameworks``; :func:`register` adds one in-process.
A distribution adds its own with a :class:`Framework` object and, in its
``pyproject.toml``::

    [project.entry-points."jupyter_disttrain.frameworks"]
    jax = "mypackage.jaxframework:JAX"

after which ``--framework jax`` runs on every backend whose capabilities admit it
(the local backend runs every registered framework).
"""

from __future__ import annotations

from ..plugins import FRAMEWORKS, UnknownPlugin
from ..runtime.checkpoint.format import register_format
from .base import AGENTS, WORKERS, Framework
from .launch import LaunchContext, Launcher, Process, ProcessPerWorker, TorchrunAgents

__all__ = [
    "AGENTS",
    "WORKERS",
    "Framework",
    "LaunchContext",
    "Launcher",
    "Process",
    "ProcessPerWorker",
    "TorchrunAgents",
    "framework",
    "known",
    "names",
    "own_collectives",
    "register",
    "unregister",
]


def names() -> tuple[str, ...]:
    """Every framework name, the default (``pytorch``) first."""
    return FRAMEWORKS.names()


def known(name: str) -> bool:
    """Whether a framework called ``name`` is registered."""
    return FRAMEWORKS.known(name)


def framework(name: str) -> Framework:
    """The framework called ``name``; :class:`~.plugins.UnknownPlugin` naming the known ones."""
    found = FRAMEWORKS.load(name)
    if not isinstance(found, Framework):
        raise UnknownPlugin(
            f"framework {name!r} is registered as {found!r}, which is not a Framework; "
            "register a jupyter_disttrain.frameworks.Framework"
        )
    for declared in found.checkpoint_formats:  # so that its checkpoints are named and read here
        register_format(declared)
    return found


def own_collectives(dist_backend: str) -> str:
    """The title of the framework whose own collectives ``dist_backend`` is, when they do not
    run on NCCL (``jax-gloo``, ``tf-ring``: NCCL and c10d advice does not apply); else ""."""
    prefix, sep, _ = dist_backend.partition("-")
    if not sep or dist_backend.endswith(("nccl", "cuda", "gpu", "rocm")):
        return ""
    for name in names():
        found = framework(name)
        if found.collectives == prefix:
            return found.title
    return ""


def register(fw: Framework | str, name: str | None = None) -> None:
    """Register ``fw`` (a :class:`Framework`, or ``"module:attribute"`` with ``name``)."""
    if isinstance(fw, Framework):
        FRAMEWORKS.register(name or fw.name, fw)
    elif name is None:
        raise ValueError("give the name to register a 'module:attribute' framework under")
    else:
        FRAMEWORKS.register(name, fw)


def unregister(name: str) -> None:
    """Forget an in-process registration (the entry points stay)."""
    FRAMEWORKS.unregister(name)
