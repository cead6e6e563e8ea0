"""Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``): the TrainJob of a job, and its state.

Pure. A TrainJob names a training runtime (``runtimeRef``) and says only what
differs from it: ``trainer`` (nodes, processes per node, image, resources,
environment, the exec-form torchrun command, which reads the ``PET_*``
variables the runtime's torch plugin sets) and ``runtimePatches`` for what
the runtime's pod template must gain (the payload and other volumes,
``/dev/shm``, node selection, tolerations, service account, pull secret).
Trainer v2.3.0's patches can touch only some pod fields: what they cannot
express is refused with the fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .. import events as ev
from ..spec import JobSpec
from . import k8s_data
from .k8s_images import STOCK_IMAGES, ImagePolicy, default_image
from .k8s_kinds import TRAINJOB
from .k8s_options import ConflictingOptionsError, K8sOptions
from .k8s_pods import pod_metadata
from .k8s_script import add_script_dir
from .manifests import (
    KUEUE_QUEUE_LABEL,
    PAYLOAD_FILE,
    Manifest,
    _env,
    _job_meta,
    _resources,
    _volumes,
    check,
    labels,
    worker_command,
)

#: Who owns the runtime patch this tool writes (``runtimePatches[].manager``).
PATCH_MANAGER: Final = "disttrain.jupyter.org/manager"
CLUSTER_RUNTIME: Final = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME: Final = "TrainingRuntime"
LABEL_FRAMEWORK: Final = "trainer.kubeflow.org/framework"


def check_trainjob(spec: JobSpec, opts: K8sOptions) -> None:
    """Raise :class:`ConflictingOptionsError` for what a TrainJob cannot carry."""
    if spec.framework != "pytorch":
        raise ConflictingOptionsError(
            f"--kubeflow-api trainjob runs PyTorch only (Kubeflow Trainer v2 has no "
            f"{spec.framework} runtime); remove --kubeflow-api to run a TFJob"
        )
    if opts.elastic is not None:
        raise ConflictingOptionsError(
            "--elastic needs the Training Operator's PyTorchJob (elasticPolicy); Kubeflow "
            "Trainer v2 has none: add --kubeflow-api pytorchjob or remove --elastic"
        )
    refused = {
        "--pip": bool(opts.pip),  # an init container with its own command
        "--host-network": opts.host_network,
        "--priority-class": opts.priority_class is not None,
        "--scheduler": opts.scheduler != "default",
    }
    for flag, given in refused.items():
        if given:
            raise ConflictingOptionsError(
                f"{flag} cannot be set on a TrainJob: Kubeflow Trainer v2.3.0's runtimePatches "
                "do not reach that pod field; set it in the training runtime, or add "
                "--kubeflow-api pytorchjob"
            )
    for source in opts.data:
        if source.read_only:
            raise ConflictingOptionsError(
                f"--data {source.src}:{source.path}:ro on a TrainJob: its training container "
                "stages the data itself (Trainer v2.3.0's runtimePatches cannot add an init "
                "container), so it mounts it writable; drop :ro, or add --kubeflow-api pytorchjob"
            )
    if opts.data_image is not None:
        raise ConflictingOptionsError(
            "--data-image needs an init container, which Kubeflow Trainer v2.3.0's "
            "runtimePatches cannot add; the TrainJob's training image copies the data: remove "
            "--data-image, or add --kubeflow-api pytorchjob"
        )
    if spec.max_restarts:
        raise ConflictingOptionsError(
            f"--max-restarts {spec.max_restarts}: a TrainJob's restarts are its training "
            "runtime's JobSet failure policy; set them there, or add --kubeflow-api pytorchjob"
        )


def trainjob(
    spec: JobSpec,
    opts: K8sOptions,
    files: Iterable[str],
    versions: Mapping[str, str],
    *,
    notebook: str | None = None,
    images: ImagePolicy = STOCK_IMAGES,
    runtime_kind: str = CLUSTER_RUNTIME,
    script: bool = False,
) -> Manifest:
    """The TrainJob of ``spec`` on runtime ``opts.runtime`` (of kind ``runtime_kind``); a
    ``script`` payload's pods get its folder (:mod:`.k8s_script`)."""
    check(spec, opts)
    check_trainjob(spec, opts)
    paths = list(files)
    if PAYLOAD_FILE not in paths:
        raise ValueError(f"the payload files must include {PAYLOAD_FILE}")
    volumes, mounts = _volumes(spec.name, opts, paths)
    data_vols, data_mounts = k8s_data.data_volumes(opts, init=False)
    volumes, mounts = volumes + data_vols, mounts + data_mounts
    command = worker_command("pytorch")
    if opts.data:  # no init container through runtimePatches: copy first, then exec torchrun
        command = k8s_data.stage_command(opts, then=command)
    trainer: dict[str, Any] = {
        "numNodes": spec.nodes,
        "numProcPerNode": spec.nproc,
        "image": opts.image or default_image("pytorch", versions, gpus=opts.gpus, policy=images),
        "command": command,
        "env": _env(spec, opts),
    }
    if script:
        add_script_dir(volumes, mounts, trainer["env"])
    resources = _resources(opts, gpus=True)
    if resources:
        trainer["resourcesPerNode"] = resources
    pod: dict[str, Any] = {
        "volumes": volumes,
        "containers": [{"name": TRAINJOB.container, "volumeMounts": mounts}],
    }
    if spec.grace_period:
        pod["terminationGracePeriodSeconds"] = math.ceil(spec.grace_period) + 5
    if opts.node_selector:
        pod["nodeSelector"] = dict(opts.node_selector)
    if opts.tolerations:
        pod["tolerations"] = [t.to_dict() for t in opts.tolerations]
    if opts.service_account:
        pod["serviceAccountName"] = opts.service_account
    if opts.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": opts.image_pull_secret}]
    pod_meta = pod_metadata(labels(spec.name), opts)
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": TRAINJOB.replicas[0],
                            "template": {"spec": {"template": {"metadata": pod_meta, "spec": pod}}},
                        }
                    ]
                }
            }
        },
    }
    body: dict[str, Any] = {
        "runtimeRef": {
            "apiGroup": TRAINJOB.group,
            "kind": runtime_kind,
            "name": opts.runtime,
        },
        "trainer": trainer,
        "runtimePatches": [patch],
    }
    if opts.queue:
        body["suspend"] = True  # Kueue admits it by lifting this
    if spec.timeout is not None:
        body["activeDeadlineSeconds"] = math.ceil(spec.timeout)
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": TRAINJOB.kind,
        "metadata": _job_meta(spec, opts, versions, notebook),
        "spec": body,
    }


def _true(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and str(cond.get("status")) == "True":
            return dict(cond)
    return None


def trainjob_condition(obj: Mapping[str, Any]) -> tuple[ev.JobState, str, str] | None:
    """A TrainJob's state: (state, reason, message), from conditions and ``jobsStatus``.

    Suspended with a Kueue queue label reads ``Pending``/``Queued``; ready
    replicated jobs read ``Running``; ``Complete``/``Failed`` are the end.
    """
    for kind, state in (("Complete", "Succeeded"), ("Failed", "Failed")):
        found = _true(obj, kind)
        if found is not None:
            return state, str(found.get("reason", "")), str(found.get("message", ""))  # type: ignore[return-value]
    suspended = _true(obj, "Suspended")
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    spec = obj.get("spec") or {}
    if suspended is not None or (spec.get("suspend") and queue):
        if queue:
            return "Pending", "Queued", f"waiting for Kueue admission in {queue}"
        return "Pending", "Suspended", str((suspended or {}).get("message", "suspended"))
    jobs = (obj.get("status") or {}).get("jobsStatus") or []
    if jobs and all(int(j.get("ready") or 0) > 0 for j in jobs):
        name = (obj.get("metadata") or {}).get("name")
        progress = trainer_progress(obj)
        return "Running", "Running", f"TrainJob {name} is running{progress}"
    if jobs or (obj.get("status") or {}).get("conditions"):
        return "Pending", "Created", "the TrainJob's pods are starting"
    return None


def trainer_progress(obj: Mapping[str, Any]) -> str:
    """``", 40% done, about 5 min left (loss 0.31)"`` from ``status.trainerStatus``, or ""."""
    status = (obj.get("status") or {}).get("trainerStatus") or {}
    parts = []
    if status.get("progressPercentage") is not None:
        parts.append(f"{int(status['progressPercentage'])}% done")
    if status.get("estimatedRemainingSeconds") is not None:
        left = int(status["estimatedRemainingSeconds"])
        parts.append(f"about {left // 60} min left" if left >= 120 else f"about {left} s left")
    metrics = ", ".join(
        f"{m.get('name')} {m.get('value')}" for m in status.get("metrics") or [] if m.get("name")
    )
    text = ", " + ", ".join(parts) if parts else ""
    return text + (f" ({metrics})" if metrics else "")


def trainjob_shape(obj: Mapping[str, Any]) -> tuple[int, int]:
    """(nodes, processes per node) of a TrainJob."""
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    try:
        nproc = int(trainer.get("numProcPerNode") or 1)
    except (TypeError, ValueError):
        nproc = 1
    return int(trainer.get("numNodes") or 1), nproc
