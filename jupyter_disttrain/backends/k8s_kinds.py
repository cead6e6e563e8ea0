"""The Kubeflow kinds this backend creates, in one table the manifests, client and status read.

Pure data. Adding a kind (e.g. Trainer v2's ``TrainJob``) is one entry here
plus its manifest builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class KubeflowKind:
    """One Kubeflow custom resource: where it is served and how its pods are laid out.

    ``replicas`` are the replica types in node order (the first holds node 0);
    ``container`` is the container the operator configures (env, ports);
    ``port_name``/``port`` the port it reads the rendezvous/cluster port from;
    ``pod_label`` the label whose value is the job's name on each of its pods;
    ``api`` the ``--kubeflow-api`` value that selects it ("" for TFJob).
    """

    group: str
    version: str
    plural: str
    kind: str
    replicas_field: str
    replicas: tuple[str, ...]
    container: str
    port_name: str
    port: int
    pod_label: str = "training.kubeflow.org/job-name"
    api: str = ""

    @property
    def api_version(self) -> str:
        """``group/version`` as written in a manifest."""
        return f"{self.group}/{self.version}"


PYTORCHJOB: Final = KubeflowKind(
    group="kubeflow.org", version="v1", plural="pytorchjobs", kind="PyTorchJob",
    replicas_field="pytorchReplicaSpecs", replicas=("Master", "Worker"),
    container="pytorch", port_name="pytorchjob-port", port=23456, api="pytorchjob",
)  # fmt: skip
TFJOB: Final = KubeflowKind(
    group="kubeflow.org", version="v1", plural="tfjobs", kind="TFJob",
    replicas_field="tfReplicaSpecs", replicas=("Chief", "Worker"),
    container="tensorflow", port_name="tfjob-port", port=2222,
)  # fmt: skip

#: Kubeflow Trainer v2: one replicated job ``node``; pods found by their JobSet.
TRAINJOB: Final = KubeflowKind(
    group="trainer.kubeflow.org", version="v1alpha1", plural="trainjobs", kind="TrainJob",
    replicas_field="", replicas=("node",), container="node", port_name="", port=29500,
    pod_label="jobset.sigs.k8s.io/jobset-name", api="trainjob",
)  # fmt: skip

#: The kind each ``--framework`` runs as by default.
BY_FRAMEWORK: Final = {"pytorch": PYTORCHJOB, "tensorflow": TFJOB}
#: Every kind, in the order a job of unknown kind is looked for.
KINDS: Final = (TRAINJOB, PYTORCHJOB, TFJOB)
BY_API: Final = {k.api: k for k in KINDS if k.api}


def kind_of(framework: str, api: str | None) -> KubeflowKind:
    """The kind a job runs as: TensorFlow as TFJob, PyTorch per ``--kubeflow-api``."""
    if framework == "tensorflow":
        return TFJOB
    return BY_API.get(api or "", PYTORCHJOB)
