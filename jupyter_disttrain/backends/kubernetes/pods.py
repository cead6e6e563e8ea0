"""What every pod of a job carries beyond its containers: labels, annotations, host ports.

Pure. Run:ai (``--runai-project``, ``--gpu-fraction``) is expressed as its own
submission sets it: the project's namespace ``runai-NAME`` (see
:mod:`.options`), the ``project`` label, the ``runai-scheduler`` and, for
a share of one GPU, the ``gpu-fraction`` pod annotation.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .options import K8sOptions

RUNAI_PROJECT_LABEL: Final = "project"
RUNAI_SCHEDULER: Final = "runai-scheduler"
RUNAI_GPU_FRACTION: Final = "gpu-fraction"


def pod_metadata(base_labels: Mapping[str, str], opts: K8sOptions) -> dict[str, Any]:
    """The labels and annotations of every pod of the job."""
    pod_labels = dict(base_labels)
    # An injected service-mesh sidecar keeps a finished pod running forever.
    annotations = {"sidecar.istio.io/inject": "false"}
    if opts.runai_project:
        pod_labels[RUNAI_PROJECT_LABEL] = opts.runai_project
    if opts.gpu_fraction is not None:
        annotations[RUNAI_GPU_FRACTION] = f"{opts.gpu_fraction:g}"
    return {"labels": pod_labels, "annotations": annotations}


def host_port(name: str, opts: K8sOptions) -> int:
    """The master port of a host-network job.

    Its pods share their node's ports with every other host-network pod there,
    so each job gets its own port in 20000-29999 from its namespace and name
    (the same on every pod of the job, different between jobs but for a 1 in
    10,000 chance per pair that share a node).
    """
    key = f"{opts.namespace or ''}/{name}".encode()
    return 20000 + zlib.crc32(key) % 10000
