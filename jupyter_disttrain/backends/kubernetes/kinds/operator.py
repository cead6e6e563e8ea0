"""What the Training Operator v1 kinds (``kubeflow.org/v1``) share: replica specs, run
policy, ``status.conditions``, and pods numbered by replica type and index (pure).

A v1 job lists its replica types in ``spec.<replicas_field>``; its leader
replica (the kind's first, e.g. ``Master``) runs node 0 and worker ``i`` runs
node ``i + 1``, or node ``i`` when the job has no leader (elastic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .... import events as ev
from .base import Condition, KubeflowKind

if TYPE_CHECKING:
    from ....spec import JobSpec
    from ..options import K8sOptions

REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
#: Pod labels the Training Operator sets: job role ``master`` on the leader's pods.
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"

#: What a 404 on a v1 kind means, and the fix.
OPERATOR_INSTALL: Final = (
    "the Kubeflow Training Operator is not installed. An admin installs it with: "
    'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/'
    'manifests/overlays/standalone?ref=v1.9.4"'
)
#: What the v1 kinds refuse, as ``KubeflowKind.refuses``: JAX runs as a TrainJob only.
V1_REFUSES: Final = (
    (
        "jax",
        "--framework jax runs as a Kubeflow Trainer v2 TrainJob on the jax-distributed "
        "runtime (one JAX process per pod); the Training Operator's v1 kinds have no JAX "
        "job: remove --kubeflow-api, or use --kubeflow-api trainjob",
    ),
)
#: The replica type of the workers (every v1 kind has them), as pod labels spell it.
WORKER: Final = "worker"

#: Operator condition type -> our job state.
CONDITION_STATES: Final[dict[str, ev.JobState]] = {
    "Created": "Pending",
    "Running": "Running",
    "Restarting": "Restarting",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
    "Suspended": "Pending",
}


def job_condition(obj: Mapping[str, Any]) -> Condition | None:
    """The current state of a v1 job (its last true condition): (state, reason, message)."""
    conditions = [
        c
        for c in (obj.get("status") or {}).get("conditions") or []
        if str(c.get("status", "True")) == "True"
    ]
    if not conditions:
        return None
    last = conditions[-1]
    state = CONDITION_STATES.get(str(last.get("type")), "Pending")
    return state, str(last.get("reason", "")), str(last.get("message", ""))


def replica(replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    """One replica spec: ``replicas`` pods of ``template``, restarted on failure."""
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": template}


def run_policy(spec: JobSpec, opts: K8sOptions, min_available: int) -> dict[str, Any]:
    """The job's ``runPolicy``: restarts, deadline, and Volcano's gang of ``min_available``."""
    policy: dict[str, Any] = {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts}
    if spec.timeout is not None:
        policy["activeDeadlineSeconds"] = math.ceil(spec.timeout)
    if opts.scheduler == "volcano":
        gang: dict[str, Any] = {"minAvailable": min_available}
        if opts.queue:
            gang["queue"] = opts.queue
        if opts.priority_class:
            gang["priorityClass"] = opts.priority_class
        policy["schedulingPolicy"] = gang
    return policy


def _replica_type(pod: Mapping[str, Any]) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(REPLICA_TYPE_LABEL, WORKER)).lower()


class OperatorKind(KubeflowKind):
    """A Training Operator v1 kind: its first replica type is the leader (node 0)."""

    @property
    def leader_replica(self) -> str:
        """The replica type that runs node 0 when present (``Master``, ``Chief``)."""
        return self.replicas[0]

    def condition(self, obj: Mapping[str, Any], ran: bool = False) -> Condition | None:
        """The last true condition of ``status.conditions`` (see :func:`job_condition`):
        the operator's own ``Restarting`` says a restart, whether the job ``ran`` or not."""
        return job_condition(obj)

    def shape(self, obj: Mapping[str, Any]) -> tuple[int, int]:
        """Nodes: every replica summed; processes: ``nprocPerNode`` or the elastic policy's."""
        spec = obj.get("spec") or {}
        replicas = spec.get(self.replicas_field) or {}
        nodes = sum(int(r.get("replicas", 1)) for r in replicas.values()) or 1
        nproc = spec.get("nprocPerNode") or (spec.get("elasticPolicy") or {}).get("nProcPerNode")
        try:
            return nodes, int(nproc or 1)
        except (TypeError, ValueError):
            return nodes, 1

    def has_leader(self, obj: Mapping[str, Any]) -> bool:
        """True when the job's replica specs hold the leader replica."""
        specs = (obj.get("spec") or {}).get(self.replicas_field) or {}
        return self.leader_replica in specs

    def owns(self, pod: Mapping[str, Any]) -> bool:
        """True for a pod labelled with one of this kind's replica types."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return REPLICA_TYPE_LABEL in labels and _replica_type(pod) in {
            r.lower() for r in self.replicas
        }

    def node_index(self, pod: Mapping[str, Any], has_leader: bool) -> int:
        """The leader's replica index; a worker's index, after the leader when there is one."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        index = int(labels.get(REPLICA_INDEX_LABEL, "0"))
        if _replica_type(pod) == self.leader_replica.lower():
            return index
        return index + 1 if has_leader else index

    def pods_have_leader(self, pods: Sequence[Mapping[str, Any]]) -> bool:
        """True when one of the pods is of the leader replica type."""
        return any(_replica_type(p) == self.leader_replica.lower() for p in pods)
