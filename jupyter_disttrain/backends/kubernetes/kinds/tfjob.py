"""The Training Operator's ``TFJob`` (``kubeflow.org/v1``): Chief and Workers, one process each.

Pure. Chief 1 + Worker ``nodes - 1``; each pod runs the worker module with
plain ``python -m`` and the operator's ``TF_CONFIG``, one process that uses
all of its node's GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from ..images import STOCK_IMAGES, ImagePolicy
from ..template import PYTHON_MODULE, Manifest, job_metadata, plain, pod_template
from .base import Limits
from .operator import OPERATOR_INSTALL, REPLICA_TYPE_LABEL, OperatorKind, replica, run_policy

if TYPE_CHECKING:
    from ....spec import JobSpec
    from ..options import K8sOptions

#: What a TFJob cannot run, each with its fix.
TFJOB_LIMITS: Final = Limits(
    elastic="--elastic needs --framework pytorch; remove --elastic",
    nproc="--nproc {nproc} with TensorFlow: a TFJob runs one process per node that uses all "
    "of the node's GPUs; use --nproc 1",
    prometheus="--prometheus serves the metrics every rank reports through rank 0, which "
    "needs --framework pytorch; remove --prometheus",
)


class TFJobKind(OperatorKind):
    """A ``TFJob``: its Chief runs node 0."""

    def manifest(
        self,
        spec: JobSpec,
        opts: K8sOptions,
        files: Iterable[str],
        versions: Mapping[str, str],
        *,
        notebook: str | None = None,
        images: ImagePolicy = STOCK_IMAGES,
        script: bool = False,
        runtime_kind: str = "",
    ) -> Manifest:
        """The ``TFJob`` of ``spec``: Chief 1 + Worker ``nodes - 1``."""
        template = pod_template(self, spec, opts, files, versions, images, script)
        replicas = {self.replicas[0]: replica(1, template)}
        if spec.nodes > 1:
            replicas[self.replicas[1]] = replica(spec.nodes - 1, plain(template))
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": job_metadata(spec, opts, versions, notebook),
            "spec": {self.replicas_field: replicas,
                     "runPolicy": run_policy(spec, opts, spec.nodes)},
        }  # fmt: skip

    def leader_selector(self, job: str) -> dict[str, str]:
        """The Chief's pod, by its replica type."""
        return {self.pod_label: job, REPLICA_TYPE_LABEL: self.leader_replica.lower()}


TFJOB: Final = TFJobKind(
    group="kubeflow.org", version="v1", plural="tfjobs", kind="TFJob",
    replicas_field="tfReplicaSpecs", replicas=("Chief", "Worker"),
    container="tensorflow", port_name="tfjob-port", port=2222,
    frameworks=("tensorflow",), launcher=PYTHON_MODULE, limits=TFJOB_LIMITS,
    install=OPERATOR_INSTALL,
)  # fmt: skip


def tfjob(
    spec: JobSpec,
    opts: K8sOptions,
    files: Iterable[str],
    versions: Mapping[str, str],
    *,
    notebook: str | None = None,
    images: ImagePolicy = STOCK_IMAGES,
    script: bool = False,
) -> Manifest:
    """The ``TFJob`` for ``spec``; as :func:`.pytorchjob.pytorchjob`."""
    return TFJOB.manifest(spec, opts, files, versions, notebook=notebook, images=images,
                          script=script)  # fmt: skip
