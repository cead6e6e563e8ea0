"""Kubeflow Trainer v2 (v2.3.0): its names, served kinds and status conditions.

Shared by the TrainJob controller (``trainjob.py``), the JobSet it builds
(``trainer_jobset.py``) and the Trainer's webhooks (``trainer_webhooks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .meta import Obj, now
from .resources import Resource

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
COMPONENT = "trainer-trainjob-controller"
CONTROLLER_NAME = "trainer.kubeflow.org/trainjob-controller"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"

LABEL_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
LABEL_SUPPORT = "trainer.kubeflow.org/support"
ANCESTOR_TRAINER = "trainer"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
NODE = "node"
TRAINER_PORT = 29500
STORAGE_URI = "STORAGE_URI"
VOLUME_INITIALIZER = "initializer"
SNAPSHOT_SUFFIX = "-runtime-snapshot"
TORCH_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
TORCHTUNE = ["tune", "run"]
COMPLETION_INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
DEPRECATION_URL = (
    "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
)

SUSPENDED = ("Suspended", "TrainJob is suspended")
RESUMED = ("Resumed", "TrainJob is resumed")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "TrainJob exceeded its active deadline")

CLUSTER_KIND = "ClusterTrainingRuntime"
NAMESPACED_KIND = "TrainingRuntime"


@dataclass(frozen=True)
class TrainerKinds:
    """The served Trainer v2 resources."""

    trainjobs: Resource
    trainingruntimes: Resource
    clustertrainingruntimes: Resource


# --- conditions (metav1.Condition, meta.SetStatusCondition) ------------------------------------


def find(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    cond = find(status, kind)
    return bool(cond and cond.get("status") == "True")


def set_condition(status: Obj, new: Obj) -> None:
    """``meta.SetStatusCondition``: add, or update in place (the time moves with the status)."""
    conditions = status.setdefault("conditions", [])
    current = find(status, new["type"])
    if current is None:
        cond = {"type": new["type"], "status": new["status"]}
        cond["lastTransitionTime"] = new.get("lastTransitionTime") or now()
        cond.update(reason=new["reason"], message=new["message"])
        conditions.append(cond)
        return
    if current["status"] != new["status"]:
        current["status"] = new["status"]
        current["lastTransitionTime"] = new.get("lastTransitionTime") or now()
    current["reason"], current["message"] = new["reason"], new["message"]


def finished(status: Obj) -> bool:
    return is_true(status, "Complete") or is_true(status, "Failed")


def runtime_kind(ref: Obj) -> tuple[str, str]:
    """The ``(kind, apiGroup)`` a ``runtimeRef`` names (defaults filled in)."""
    return str(ref.get("kind", CLUSTER_KIND)), str(ref.get("apiGroup", GROUP))
