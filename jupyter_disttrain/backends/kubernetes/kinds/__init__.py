"""The Kubeflow kinds this backend creates: one module each, and :data:`KINDS`, their table.

Each kind is an instance of a :class:`~.base.KubeflowKind` subclass that
declares its data (API coordinates, container, frameworks, launcher,
:class:`~.base.Limits`) and implements what differs between kinds: the
manifest builder, the status and shape readers, which pods are its own and
which runs node 0, the labels of its metrics source. Everything else in the
package reads kinds through this table and those methods only.

Adding a kind is one new module here and one line in :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ....spec import SpecError
from .base import Condition, KubeflowKind, Limits, Manifest
from .pytorchjob import PYTORCHJOB
from .tfjob import TFJOB
from .trainjob import TRAINJOB

__all__ = [
    "KINDS",
    "PYTORCHJOB",
    "TFJOB",
    "TRAINJOB",
    "Condition",
    "KubeflowKind",
    "Limits",
    "Manifest",
    "apis",
    "by_api",
    "frameworks",
    "kind_of",
    "pods_kind",
    "running",
]

#: Every kind, in the order cluster discovery prefers them and a job of unknown kind is
#: looked for. Read at each call (never copied), so a kind added here is seen everywhere.
KINDS: tuple[KubeflowKind, ...] = (TRAINJOB, PYTORCHJOB, TFJOB)


def apis() -> tuple[str, ...]:
    """The ``--kubeflow-api`` values, in table order."""
    return tuple(k.api for k in KINDS if k.api)


def by_api(api: str) -> KubeflowKind | None:
    """The kind ``--kubeflow-api api`` names, or None."""
    return next((k for k in KINDS if k.api and k.api == api), None)


def frameworks() -> frozenset[str]:
    """Every ``--framework`` some kind runs."""
    return frozenset(fw for k in KINDS for fw in k.frameworks)


def running(framework: str) -> list[KubeflowKind]:
    """The kinds that run ``framework``, in table order."""
    return [k for k in KINDS if framework in k.frameworks]


def kind_of(framework: str, api: str | None) -> KubeflowKind:
    """The kind a job of ``framework`` runs as: the one ``api`` names when it runs that
    framework, else the framework's first default kind (e.g. TensorFlow as TFJob whatever
    ``--kubeflow-api`` says, PyTorch as PyTorchJob without it)."""
    kinds = running(framework)
    named = [k for k in kinds if api and k.api == api]
    defaults = [k for k in kinds if k.default]
    found = named or defaults or kinds
    if not found:
        raise SpecError(
            f"no Kubeflow kind runs --framework {framework}; use one of "
            f"{', '.join(sorted(frameworks()))}"
        )
    return found[0]


def pods_kind(pods: Sequence[Mapping[str, Any]]) -> KubeflowKind | None:
    """The kind whose pods ``pods`` are (the first that owns every one), or None."""
    if not pods:
        return None
    return next((k for k in KINDS if all(k.owns(p) for p in pods)), None)
