"""What a training framework decides about a job, asked by name through the registry.

A :class:`Framework` is a frozen description plus a few methods; the
built-ins live beside this module (:mod:`.pytorch`, :mod:`.tensorflow`) and
are registered as entry points of group ``jupyter_disttrain.frameworks``.
Nothing outside this package compares framework names: the spec, the
options, the sessions, the payload and the local backend ask the object.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..runtime.checkpoint.format import CheckpointFormat
from ..spec import JobSpec
from .launch import Launcher, ProcessPerWorker, TorchrunAgents

#: The built-in launchers (see :mod:`.launch`): torchrun agents, one process per worker.
AGENTS: Launcher = TorchrunAgents()
WORKERS: Launcher = ProcessPerWorker()


@dataclass(frozen=True)
class Framework:
    """A training framework: how its workers start and what a job of it may ask.

    ``name`` is the ``--framework`` value; ``title`` names it in messages.
    ``package`` is the import name the notebook and the workers need (its
    version is the one the workers should match, read from ``distributions``,
    the first installed wins); ``install`` says how to get it.
    ``runtime`` is ``"module:function"`` in the worker runtime that sets the
    framework up in each worker: called as ``function(payload, rank)``, it
    returns ``(process group backend, names for the cell, extra hello fields)``.
    ``launch`` is the :class:`~.launch.Launcher` that starts its processes on
    one machine; ``fork_safe`` (workers may be forked from a warm launcher when
    the launcher ``forks``; otherwise each starts as a fresh interpreter),
    ``restarts`` (a launcher on the workers' machine restarts failed
    workers in place, ``--max-restarts``), ``sessions`` (ranks can stay alive
    between cells), ``elastic`` (``--elastic MIN:MAX`` node counts).
    ``checkpoint_formats`` are the checkpoint formats its saves write and its
    loads read (registered with
    :func:`~jupyter_disttrain.runtime.checkpoint.format.register_format` when the
    framework is looked up; its runtime module registers them in the workers), ``image`` the
    default image name on clusters, a :meth:`str.format` template over the
    notebook's versions (``python`` and ``package``'s version by its name),
    ``gpu_image`` the same for pods with GPUs ("" = ``image``); ``cuda_tag``
    says the template has a ``{cuda}`` field, filled from the image policy's
    CUDA tags by ``package``'s version. ``collectives`` is the prefix of the
    process group backends its runtime reports for its own collectives
    (``jax`` for ``jax-gloo``; "" when it uses torch.distributed's).
    """

    name: str
    title: str
    package: str
    distributions: tuple[str, ...]
    install: str
    runtime: str
    launch: Launcher = AGENTS
    fork_safe: bool = True
    restarts: bool = True
    sessions: bool = False
    elastic: bool = False
    checkpoint_formats: tuple[CheckpointFormat, ...] = ()
    image: str = ""
    gpu_image: str = ""
    cuda_tag: bool = False
    collectives: str = ""

    def check_spec(self, spec: JobSpec) -> None:
        """Raise :class:`~jupyter_disttrain.spec.SpecError` for what a job of this cannot be."""

    def cluster_env(self, addresses: Sequence[str], index: int) -> dict[str, str]:
        """The environment telling worker ``index`` its cluster (launchers that ask for it)."""
        return {}

    def describe_cluster(self, endpoint: str) -> str:
        """The plan's line about how the workers find each other at ``endpoint``."""
        return f"rendezvous: c10d at {endpoint} (node 0 hosts the store)"

    def payload_fields(self) -> dict[str, Any]:
        """What a payload of this framework records for its workers: ``runtime`` (the set-up
        they call), ``versions_of`` (the packages whose versions they report in ``hello``
        and their checkpoints record) and the notebook's ``framework_version``."""
        return {
            "runtime": self.runtime,
            "versions_of": [self.package],
            "framework_version": self.notebook_version(),
        }

    @property
    def checkpoint_layouts(self) -> tuple[str, ...]:
        """The layouts of :attr:`checkpoint_formats`."""
        return tuple(f.layout for f in self.checkpoint_formats)

    @property
    def checkpoint_kinds(self) -> tuple[str, ...]:
        """The former name of :attr:`checkpoint_layouts`."""
        return self.checkpoint_layouts

    def notebook_version(self) -> str | None:
        """The version of ``package`` installed here, ``None`` if it is not."""
        for dist in self.distributions:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None
