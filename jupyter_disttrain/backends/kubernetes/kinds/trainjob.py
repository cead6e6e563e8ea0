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
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from ....spec import SpecError
from ...base import RuntimeRecord
from .. import staging
from ..client import api_error, explain
from ..images import ImagePolicy, default_image
from ..pods import pod_metadata
from ..reported import Reported, read_reported
from ..script import add_script_dir
from ..syntax import ConflictingOptionsError
from ..template import (
    KUEUE_QUEUE_LABEL,
    PYTHON_MODULE,
    TORCHRUN,
    Manifest,
    check_job,
    job_metadata,
    labels,
    launch_command,
    payload_paths,
    pod_volumes,
    resources,
    worker_env,
)
from .base import Condition, JobInputs, KubeflowKind, Limits, build

if TYPE_CHECKING:
    from ....spec import JobSpec
    from ..client import Connection
    from ..options import K8sOptions

#: Who owns the runtime patch this tool writes (``runtimePatches[].manager``).
PATCH_MANAGER: Final = "disttrain.jupyter.org/manager"
CLUSTER_RUNTIME: Final = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME: Final = "TrainingRuntime"
LABEL_FRAMEWORK: Final = "trainer.kubeflow.org/framework"
#: The label naming a JobSet pod's replicated job, and a JobSet pod's index in its
#: Indexed Job (the node rank).
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"


def check_trainjob(spec: JobSpec, opts: K8sOptions) -> None:
    """Raise :class:`ConflictingOptionsError` for what a TrainJob cannot carry."""
    if spec.framework not in TRAINJOB.frameworks:
        raise ConflictingOptionsError(
            f"--kubeflow-api trainjob runs {' and '.join(TRAINJOB.frameworks)} only (Kubeflow "
            f"Trainer v2 has no {spec.framework} runtime); remove --kubeflow-api to run a TFJob"
        )
    if TRAINJOB.launcher_of(spec.framework) != TRAINJOB.launcher and spec.nproc != 1:
        runtime = TRAINJOB.default_runtime(spec.framework)
        raise ConflictingOptionsError(
            f"--nproc {spec.nproc} with --framework {spec.framework}: the {runtime} runtime runs "
            f"one process per pod; use --nodes {spec.world_size} --nproc 1"
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


def trainjob_object(job: JobInputs) -> Manifest:
    """The TrainJob of ``job.spec`` on runtime ``opts.runtime`` (of kind
    ``job.runtime_kind``, by default :data:`CLUSTER_RUNTIME`); a script payload's pods get
    its folder (:mod:`..script`)."""
    spec, opts, versions, images = job.spec, job.opts, job.versions, job.images
    check_job(spec, opts, TRAINJOB)
    check_trainjob(spec, opts)
    paths = payload_paths(job)
    volumes, mounts = pod_volumes(spec.name, opts, paths)
    data_vols, data_mounts = staging.data_volumes(opts, init=False)
    volumes, mounts = volumes + data_vols, mounts + data_mounts
    command = launch_command(TRAINJOB, spec.framework)
    if opts.data:  # no init container through runtimePatches: copy first, then exec torchrun
        command = staging.stage_command(opts, then=command)
    trainer: dict[str, Any] = {
        "numNodes": spec.nodes,
        "numProcPerNode": spec.nproc,
        "image": opts.image or runtime_image(spec, versions, opts, images),
        "command": command,
        "env": worker_env(spec, opts, job.warm),
    }
    if not trainer["image"]:
        del trainer["image"]  # the training runtime's own image
    if job.script:
        add_script_dir(volumes, mounts, trainer["env"])
    amounts = resources(opts, gpus=True)
    if amounts:
        trainer["resourcesPerNode"] = amounts
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
            "kind": job.runtime_kind or CLUSTER_RUNTIME,
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
        "metadata": job_metadata(spec, opts, versions, job.notebook),
        "spec": body,
    }


def runtime_image(
    spec: JobSpec, versions: Mapping[str, str], opts: K8sOptions, images: ImagePolicy
) -> str:
    """The framework's stock image for the notebook's versions; "" (the runtime's own image)
    for a framework with its own training runtime (JAX: ``jax-distributed``)."""
    if TRAINJOB.default_runtime(spec.framework) is not None:
        return ""
    return default_image(spec.framework, versions, gpus=opts.gpus, policy=images)


def _true(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and str(cond.get("status")) == "True":
            return dict(cond)
    return None


def trainjob_condition(obj: Mapping[str, Any], ran: bool = False) -> Condition | None:
    """A TrainJob's state: (state, reason, message), from conditions and ``jobsStatus``.

    Suspended with a Kueue queue label reads ``Pending``/``Queued``; replicated
    jobs each ready or succeeded (a finished initializer beside ready nodes) read
    ``Running``, all succeeded before the TrainJob's ``Complete`` ``Running``/
    ``Finishing``; ``Complete``/``Failed`` are the end. Once
    the job ran (``ran``: it read ``Running`` before), a replicated job with
    neither ready nor succeeded pods reads ``Restarting``: its pods start again
    (restarted in place or made anew), which the status cannot tell from a first start.
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
    name = (obj.get("metadata") or {}).get("name")
    # every replicated job has pods up or is done (an initializer that finished, say)
    if jobs and all(_count(j, "ready") or _count(j, "succeeded") for j in jobs):
        if any(_count(j, "ready") for j in jobs):
            return "Running", "Running", f"TrainJob {name} is running{trainer_progress(obj)}"
        return "Running", "Finishing", f"TrainJob {name}'s pods have ended; not yet Complete"
    if ran and any(not _count(j, "ready") and not _count(j, "succeeded") for j in jobs):
        return "Restarting", "Restarting", "the TrainJob's pods are starting again"
    if jobs or (obj.get("status") or {}).get("conditions"):
        return "Pending", "Created", "the TrainJob's pods are starting"
    return None


def _count(replicated: Mapping[str, Any], field: str) -> int:
    return int(replicated.get(field) or 0)


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


def runtime_record(obj: Mapping[str, Any], scope: str) -> RuntimeRecord:
    """A (Cluster)TrainingRuntime as a listing row: framework label, image, nodes."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    image = ""
    for rjob in ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
        pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
        for container in (pod or {}).get("containers") or []:
            if container.get("name") == TRAINJOB.container and container.get("image"):
                image = str(container["image"])
    nodes = (spec.get("mlPolicy") or {}).get("numNodes")
    return RuntimeRecord(
        name=str(meta.get("name", "")),
        scope=scope,
        framework=str((meta.get("labels") or {}).get(LABEL_FRAMEWORK, "")),
        image=image,
        nodes=int(nodes) if nodes is not None else None,
    )


def list_runtimes(conn: Connection, *, missing_ok: bool) -> list[RuntimeRecord]:
    """The cluster's ClusterTrainingRuntimes and the namespace's TrainingRuntimes.

    Without Kubeflow Trainer v2 on the cluster: none with ``missing_ok``, else a
    :class:`~jupyter_disttrain.spec.SpecError` naming the fix.
    """
    out: list[RuntimeRecord] = []
    calls: tuple[tuple[str, Callable[[], Any]], ...] = (
        (
            "cluster",
            lambda: conn.custom.list_cluster_custom_object(
                TRAINJOB.group, TRAINJOB.version, "clustertrainingruntimes"
            ),
        ),
        (
            conn.namespace,
            lambda: conn.custom.list_namespaced_custom_object(
                TRAINJOB.group, TRAINJOB.version, conn.namespace, "trainingruntimes"
            ),
        ),
    )
    for scope, call in calls:
        try:
            listing: Any = call()
        except api_error() as exc:
            if exc.status == 404:
                if missing_ok:
                    continue
                raise SpecError(
                    "this cluster has no Kubeflow Trainer v2 (trainer.kubeflow.org is not "
                    "served); use --kubeflow-api pytorchjob or install it"
                ) from None
            raise explain(exc, kind="TrainingRuntime", name="*", namespace=conn.namespace) from None
        for obj in listing.get("items", []):
            out.append(runtime_record(obj, scope))
    return out


class TrainJobKind(KubeflowKind):
    """A Kubeflow Trainer v2 ``TrainJob``: one replicated job ``node``, pods by their JobSet."""

    def manifest(self, job: JobInputs) -> Manifest:
        """The TrainJob of ``job.spec`` (see :func:`trainjob_object`)."""
        return trainjob_object(job)

    def refuse(self, spec: JobSpec, opts: K8sOptions) -> None:
        """What a TrainJob cannot carry (:func:`check_trainjob`)."""
        check_trainjob(spec, opts)

    def runtime_kind(self, conn: Connection | None, opts: K8sOptions) -> str:
        """TrainingRuntime when the namespace has one named ``--runtime``, else
        ClusterTrainingRuntime (also without a cluster to ask)."""
        if conn is None:
            return CLUSTER_RUNTIME
        found = {(r.scope, r.name) for r in list_runtimes(conn, missing_ok=False)}
        if (conn.namespace, opts.runtime) in found:
            return NAMESPACED_RUNTIME
        if ("cluster", opts.runtime) in found:
            return CLUSTER_RUNTIME
        offered = ", ".join(sorted({n for _, n in found})) or "none"
        raise SpecError(
            f"--runtime {opts.runtime}: no TrainingRuntime in namespace {conn.namespace!r} and "
            f"no ClusterTrainingRuntime has that name; this cluster offers: {offered}"
        )

    def runtimes(self, conn: Connection, *, missing_ok: bool) -> list[RuntimeRecord]:
        """The training runtimes a TrainJob can name (:func:`list_runtimes`)."""
        return list_runtimes(conn, missing_ok=missing_ok)

    def condition(self, obj: Mapping[str, Any], ran: bool = False) -> Condition | None:
        """From conditions and ``jobsStatus`` (:func:`trainjob_condition`)."""
        return trainjob_condition(obj, ran)

    def reported(self, obj: Mapping[str, Any]) -> Reported | None:
        """``status.trainerStatus`` (Trainer v2.2+), written by any trainer process."""
        return read_reported((obj.get("status") or {}).get("trainerStatus"))

    def shape(self, obj: Mapping[str, Any]) -> tuple[int, int]:
        """``trainer.numNodes`` and ``numProcPerNode`` (:func:`trainjob_shape`)."""
        return trainjob_shape(obj)

    def has_leader(self, obj: Mapping[str, Any]) -> bool:
        """Never: node ``i`` is the pod of completion index ``i``."""
        return False

    def owns(self, pod: Mapping[str, Any]) -> bool:
        """A pod of an Indexed Job (JobSet)."""
        return COMPLETION_INDEX_LABEL in ((pod.get("metadata") or {}).get("labels") or {})

    def node_index(self, pod: Mapping[str, Any], has_leader: bool) -> int:
        """The pod's completion index."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return int(labels.get(COMPLETION_INDEX_LABEL, "0"))

    def pods_have_leader(self, pods: Sequence[Mapping[str, Any]]) -> bool:
        """Never (see :meth:`has_leader`)."""
        return False

    def runs_nodes(self, pod: Mapping[str, Any]) -> bool:
        """A pod of the replicated job ``node`` (not of an initializer)."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(REPLICATED_JOB_LABEL, self.replicas[0]) == self.replicas[0])

    def leader_selector(self, job: str) -> dict[str, str]:
        """Index 0 of the first Job of replicated job ``node``."""
        return {
            self.pod_label: job,
            REPLICATED_JOB_LABEL: self.replicas[0],
            JOB_INDEX_LABEL: "0",
            COMPLETION_INDEX_LABEL: "0",
        }


#: Kubeflow Trainer v2: one replicated job ``node``; pods found by their JobSet. PyTorch runs
#: as a TrainJob only when ``--kubeflow-api trainjob`` or the cluster's discovery says so; JAX
#: always, on the ``jax-distributed`` runtime (plain ``python -m``, one process per pod).
TRAINJOB: Final = TrainJobKind(
    group="trainer.kubeflow.org",
    version="v1alpha1",
    plural="trainjobs",
    kind="TrainJob",
    replicas_field="",
    replicas=("node",),
    container="node",
    port_name="",
    port=29500,
    pod_label="jobset.sigs.k8s.io/jobset-name",
    api="trainjob",
    frameworks=("pytorch", "jax"),
    launcher=TORCHRUN,
    default=False,
    limits=Limits(gpu_per_process=True),
    launchers=(("jax", PYTHON_MODULE),),
    framework_runtimes=(("jax", "jax-distributed"),),
)


#: The TrainJob for ``spec``: ``trainjob(spec, opts, files, versions, **extra)`` (see
#: :func:`.base.build`).
trainjob: Final = partial(build, TRAINJOB)
