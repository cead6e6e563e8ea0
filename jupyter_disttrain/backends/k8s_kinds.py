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
    ``port_name``/``port`` the port it reads the rendezvous/cluster port from.
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

    @property
    def api_version(self) -> str:
        """``group/version`` as written in a manifest."""
        return f"{self.group}/{self.version}"


PYTORCHJOB: Final = KubeflowKind(
    group="kubeflow.org", version="v1", plural="pytorchjobs", kind="PyTorchJob",
    replicas_field="pytorchReplicaSpecs", replicas=("Master", "Worker"),
    container="pytorch", port_name="pytorchjob-port", port=23456,
)  # fmt: skip
TFJOB: Final = KubeflowKind(
    group="kubeflow.org", version="v1", plural="tfjobs", kind="TFJob",
    replicas_field="tfReplicaSpecs", replicas=("Chief", "Worker"),
    container="tensorflow", port_name="tfjob-port", port=2222,
)  # fmt: skip

#: The kind each ``--framework`` runs as.
BY_FRAMEWORK: Final = {"pytorch": PYTORCHJOB, "tensorflow": TFJOB}
