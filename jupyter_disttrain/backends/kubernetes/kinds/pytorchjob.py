"""The Training Operator's ``PyTorchJob`` (``kubeflow.org/v1``): Master and Workers run torchrun.

Pure. Master 1 + Worker ``nodes - 1`` (Worker omitted for one node), or,
with ``--elastic``, Worker ``nodes`` and an ``elasticPolicy`` (c10d).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any, Final

from ..rendezvous import rdzv_conf_items
from ..template import TORCHRUN, Manifest, job_metadata, plain, pod_template
from .base import JobInputs, Limits, build
from .operator import (
    JOB_ROLE_LABEL,
    OPERATOR_INSTALL,
    V1_REFUSES,
    OperatorKind,
    replica,
    run_policy,
)

#: The init container the Training Operator gives a Worker, and the name it waits for.
INIT_CONTAINER: Final = "init-pytorch"
_NSLOOKUP: Final = re.compile(r"\bnslookup ([\w.\-]+)")


class PyTorchJobKind(OperatorKind):
    """A ``PyTorchJob``: its Master runs node 0 (an elastic job has Workers only)."""

    def manifest(self, job: JobInputs) -> Manifest:
        """The ``PyTorchJob`` of ``spec`` (see :func:`pytorchjob`)."""
        spec, opts = job.spec, job.opts
        template = pod_template(self, job)
        body: dict[str, Any] = {}
        if opts.elastic is not None:
            # Without a Master the operator sets PET_NPROC_PER_NODE only from the
            # policy's nProcPerNode (and rejects it beside spec.nprocPerNode).
            body["elasticPolicy"] = {
                "rdzvBackend": "c10d",
                "rdzvId": spec.name,
                "minReplicas": opts.elastic.min_nodes,
                "maxReplicas": opts.elastic.max_nodes,
                "maxRestarts": spec.max_restarts,
                "nProcPerNode": spec.nproc,
            }
            conf = rdzv_conf_items(opts.elastic.max_nodes * spec.nproc)
            if conf:  # the operator writes PET_RDZV_CONF from it
                body["elasticPolicy"]["rdzvConf"] = conf
            body[self.replicas_field] = {self.replicas[1]: replica(spec.nodes, template)}
            min_available = opts.elastic.min_nodes
        else:
            body["nprocPerNode"] = str(spec.nproc)
            replicas = {self.replicas[0]: replica(1, template)}
            if spec.nodes > 1:
                replicas[self.replicas[1]] = replica(spec.nodes - 1, plain(template))
            body[self.replicas_field] = replicas
            min_available = spec.nodes
        body["runPolicy"] = run_policy(spec, opts, min_available)
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": job_metadata(spec, opts, job.versions, job.notebook),
            "spec": body,
        }

    def leader_selector(self, job: str) -> dict[str, str]:
        """The Master's pod: the operator labels it with job role ``master``."""
        return {self.pod_label: job, JOB_ROLE_LABEL: "master"}

    def name_wait(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        """The operator's ``init-pytorch`` of a Worker, while it runs: it loops on
        ``nslookup MASTER`` (printing ``waiting for master``) until the Master's name resolves."""
        statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
        running = any(
            s.get("name") == INIT_CONTAINER and (s.get("state") or {}).get("running")
            for s in statuses
        )
        if not running:
            return None
        for container in (pod.get("spec") or {}).get("initContainers") or []:
            if container.get("name") == INIT_CONTAINER:
                command = " ".join(
                    map(str, [*container.get("command", []), *container.get("args", [])])
                )
                found = _NSLOOKUP.search(command)
                return (INIT_CONTAINER, found.group(1)) if found else None
        return None


PYTORCHJOB: Final = PyTorchJobKind(
    group="kubeflow.org",
    version="v1",
    plural="pytorchjobs",
    kind="PyTorchJob",
    replicas_field="pytorchReplicaSpecs",
    replicas=("Master", "Worker"),
    container="pytorch",
    port_name="pytorchjob-port",
    port=23456,
    api="pytorchjob",
    frameworks=("pytorch",),
    launcher=TORCHRUN,
    limits=Limits(gpu_per_process=True),
    install=OPERATOR_INSTALL,
    refuses=V1_REFUSES,
)


#: The ``PyTorchJob`` for ``spec``: ``pytorchjob(spec, opts, files, versions, **extra)`` (see
#: :func:`.base.build`).
pytorchjob: Final = partial(build, PYTORCHJOB)
