"""Every Kubernetes object of a job, in creation order: payload object, job, metrics objects.

Pure: plain dicts in, plain dicts out. The job object is built by its kind
(:mod:`.kinds`), chosen by the spec's framework and ``--kubeflow-api``; the
parts every kind shares are in :mod:`.template`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .images import STOCK_IMAGES, ImagePolicy
from .kinds import kind_of
from .kinds.base import build
from .kinds.pytorchjob import pytorchjob as pytorchjob  # re-exported: the builders
from .kinds.tfjob import tfjob as tfjob
from .kinds.trainjob import trainjob as trainjob
from .metrics import metrics_objects
from .template import Manifest, check_job, labels, launch_command, payload_object

if TYPE_CHECKING:
    from ...spec import JobSpec
    from .options import K8sOptions


def check(spec: JobSpec, opts: K8sOptions) -> None:
    """Raise :class:`~.syntax.ConflictingOptionsError` when ``opts`` cannot run ``spec`` as
    the kind it runs as (see :func:`.template.check_job`)."""
    check_job(spec, opts, kind_of(spec.framework, opts.kubeflow_api))


def worker_command(framework: str) -> list[str]:
    """The exec-form command of every training container of a ``framework`` job."""
    return launch_command(kind_of(framework, None), framework)


def manifests(
    spec: JobSpec,
    opts: K8sOptions,
    payload_files: Mapping[str, bytes],
    versions: Mapping[str, str],
    *,
    notebook: str | None = None,
    images: ImagePolicy = STOCK_IMAGES,
    script: bool = False,
    runtime_kind: str = "",
    warm: Sequence[str] = (),
) -> list[Manifest]:
    """Every object of job ``spec`` in creation order: payload object, the job, then its
    ``--prometheus`` Service and ServiceMonitor.

    ``payload_files`` maps relative paths (``payload.pkl``,
    ``jupyter_disttrain/runtime/worker.py``, ...) to contents; they appear
    under ``/opt/disttrain/payload`` in each pod, which is on ``PYTHONPATH``.
    ``notebook`` (a path) is recorded as an annotation; ``runtime_kind`` is
    what the kind's :meth:`~.kinds.base.KubeflowKind.runtime_kind` said; ``warm`` the
    library modules each pod's launcher imports ahead. Raises
    :class:`~.syntax.OptionError` or :class:`~.template.PayloadTooLarge` before
    anything could be created.
    """
    kind = kind_of(spec.framework, opts.kubeflow_api)
    job = build(
        kind,
        spec,
        opts,
        payload_files,
        versions,
        notebook=notebook,
        images=images,
        script=script,
        runtime_kind=runtime_kind,
        warm=tuple(warm),
    )
    payload_obj = payload_object(spec.name, opts.namespace, payload_files, opts.payload_secret)
    extras = metrics_objects(spec.name, opts.namespace, kind, opts, labels(spec.name))
    return [payload_obj, job, *extras]
