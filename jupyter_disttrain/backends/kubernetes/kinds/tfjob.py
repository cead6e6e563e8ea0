"""The Training Operator's ``TFJob`` (``kubeflow.org/v1``): Chief and Workers, one process each.

Pure. Chief 1 + Worker ``nodes - 1``; each pod runs the worker module with
plain ``python -m`` and the operator's ``TF_CONFIG``, one process that uses
all of its node's GPUs.
"""

from __future__ import annotations

from functools import partial
from typing import Final

from ..template import PYTHON_MODULE, Manifest, job_metadata, plain, pod_template
from .base import JobInputs, Limits, build
from .operator import (
    OPERATOR_INSTALL,
    REPLICA_TYPE_LABEL,
    V1_REFUSES,
    OperatorKind,
    replica,
    run_policy,
)

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

    def manifest(self, job: JobInputs) -> Manifest:
        """The ``TFJob`` of ``spec``: Chief 1 + Worker ``nodes - 1``."""
        spec, opts = job.spec, job.opts
        template = pod_template(self, job)
        replicas = {self.replicas[0]: replica(1, template)}
        if spec.nodes > 1:
            replicas[self.replicas[1]] = replica(spec.nodes - 1, plain(template))
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": job_metadata(spec, opts, job.versions, job.notebook),
            "spec": {
                self.replicas_field: replicas,
                "runPolicy": run_policy(spec, opts, spec.nodes),
            },
        }

    def leader_selector(self, job: str) -> dict[str, str]:
        """The Chief's pod, by its replica type."""
        return {self.pod_label: job, REPLICA_TYPE_LABEL: self.leader_replica.lower()}


TFJOB: Final = TFJobKind(
    group="kubeflow.org",
    version="v1",
    plural="tfjobs",
    kind="TFJob",
    replicas_field="tfReplicaSpecs",
    replicas=("Chief", "Worker"),
    container="tensorflow",
    port_name="tfjob-port",
    port=2222,
    frameworks=("tensorflow",),
    launcher=PYTHON_MODULE,
    limits=TFJOB_LIMITS,
    install=OPERATOR_INSTALL,
    refuses=V1_REFUSES,
)


#: The ``TFJob`` for ``spec``: ``tfjob(spec, opts, files, versions, **extra)`` (see
#: :func:`.base.build`).
tfjob: Final = partial(build, TFJOB)
