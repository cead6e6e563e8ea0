"""Kubeflow Trainer v2 (v2.3.0): the TrainJob controller, its webhooks and CRD rules.

* Runtime: ``spec.runtimeRef`` (``ClusterTrainingRuntime`` by default, or a
  ``TrainingRuntime`` of the TrainJob's namespace) is read once and kept in a
  ``<trainjob>-runtime-snapshot`` ConfigMap the TrainJob owns; later
  reconciles use the snapshot. A kind other than those two fails the TrainJob
  (``TrainingRuntimeNotSupported``); a missing runtime is an Event
  (``TrainJobResourcesCreationFailed``) and a retry, when the webhook let it
  through.
* The JobSet (named as the TrainJob, owned by it): the runtime's JobSet
  template with ``spec.runtimePatches`` merged in (strategic merge patch:
  containers, volumes, env by name...; their labels and annotations on the
  JobSet), the trainer step (``trainer.kubeflow.org/trainjob-ancestor-step:
  trainer``) with ``replicas: 1`` and ``parallelism = completions = numNodes``
  (``mlPolicy.numNodes``, then ``spec.trainer.numNodes``), and on its ``node``
  container ``spec.trainer``'s ``image``, ``command``, ``args``, ``env`` and
  ``resourcesPerNode``. The torch plugin adds ``PET_NNODES``,
  ``PET_NPROC_PER_NODE`` (``numProcPerNode``; else ``auto`` with GPUs, the
  CPU count without), ``PET_NODE_RANK`` (from the pod's completion index),
  ``PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>``, ``PET_MASTER_PORT=29500``
  and the container port 29500 (also on ``envInjection`` targets). The JobSet
  is applied once, then again only while the TrainJob or the JobSet is
  suspended (``spec.suspend`` follows the TrainJob's).
* Status: ``Suspended`` (``Suspended`` / ``Resumed``), ``Complete`` and
  ``Failed`` copied from the JobSet's ``Completed``/``Failed`` conditions,
  ``jobsStatus`` from its ``replicatedJobsStatus``, ``activeDeadlineSeconds``
  (``DeadlineExceeded``, the JobSet deleted).
* Webhooks (``Emulator(webhooks=False)`` turns them off): the defaulter stamps
  ``runtimePatches[].time``; the validator refuses (403) a TrainJob whose
  runtime does not exist, reserved ``PET_*`` variables in
  ``spec.trainer.env``, runtime patches naming unknown replicated jobs or
  containers, env patches on the ``node`` container, a manager that is not a
  domain-prefixed path, and patch changes while the TrainJob runs; runtimes'
  trainer step must have ``replicas: 1`` and a ``node`` container.
* CRD rules (CEL, evaluated by hand): a TrainJob's name is an RFC 1035 label of
  at most 63 characters; ``runtimeRef``, ``trainer``, ``initializer``,
  ``managedBy`` and ``activeDeadlineSeconds`` are immutable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import yaml

from .apiserver import ApiServer
from .loop import ControlLoop, Key, RetryLater, controller_of, owner_ref
from .meta import ApiError, Obj, deep, parse_time
from .resources import CONFIGMAPS, JOBSETS
from .store import Event
from .trainer import (
    API_VERSION,
    CLUSTER_KIND,
    COMPONENT,
    CONTROLLER_NAME,
    DEADLINE_EXCEEDED,
    GROUP,
    NAMESPACED_KIND,
    RESUMED,
    SNAPSHOT_SUFFIX,
    SUSPENDED,
    TrainerKinds,
    find,
    finished,
    is_true,
    runtime_kind,
    set_condition,
)
from .trainer_jobset import build_jobset
from .trainer_webhooks import TrainerWebhooks

_NOT_FOUND = {
    CLUSTER_KIND: "not found ClusterTrainingRuntime specified in TrainJob",
    NAMESPACED_KIND: "TrainingRuntime specified in TrainJob is not found",
}


# --- the controller -----------------------------------------------------------------------------


class TrainJobController(ControlLoop):
    """The Trainer's TrainJob controller, with the torch, PlainML and JobSet plugins."""

    name = "trainjob-controller"

    def __init__(
        self,
        api: ApiServer,
        kinds: TrainerKinds,
        plugins: Iterable[Callable[[Obj, Obj], None]] = (),
    ) -> None:
        self.kinds = kinds
        #: Runtime plugins that change the JobSet before it is applied (``TrainJobStatus``).
        self.plugins = list(plugins)
        self.webhooks = TrainerWebhooks(api, kinds)
        super().__init__(api)

    def keys_for(self, event: Event) -> list[Key]:
        meta = event.obj["metadata"]
        if event.resource == self.kinds.trainjobs.key:
            return [(meta["namespace"], meta["name"])]
        if event.resource == JOBSETS.key:
            ref = controller_of(event.obj, "TrainJob")
            if ref is not None and ref.get("apiVersion") == API_VERSION:
                return [(meta["namespace"], ref["name"])]
        return []

    def resync(self) -> list[Key]:
        """TrainJobs with an active deadline."""
        return [
            (tj["metadata"]["namespace"], tj["metadata"]["name"])
            for tj in self.api.store.objects(self.kinds.trainjobs.key)[0]
            if (tj.get("spec") or {}).get("activeDeadlineSeconds")
            and not finished(tj.get("status") or {})
        ]

    def reconcile(self, key: Key) -> float | None:
        namespace, name = key
        trainjob = self.api.store.get(self.kinds.trainjobs.key, namespace, name)
        if trainjob is None or trainjob["metadata"].get("deletionTimestamp"):
            return None
        spec = trainjob.get("spec") or {}
        if spec.get("managedBy", CONTROLLER_NAME) != CONTROLLER_NAME:
            return None
        old = trainjob.get("status") or {}
        status = deep(old)
        failed = find(status, "Failed")
        if failed is not None and failed.get("reason") != DEADLINE_EXCEEDED[0]:
            status["conditions"].remove(failed)
        kind, group = runtime_kind(spec.get("runtimeRef") or {})
        error: str | None = None
        if group != GROUP or kind not in (CLUSTER_KIND, NAMESPACED_KIND):
            # v2.3.0 sets Failed/TrainingRuntimeNotSupported here, then calls the status
            # plugin of the runtime it did not find: the reconcile panics (recovered by
            # controller-runtime) before the status is written, and is retried with back-off.
            # (The webhook refuses such a TrainJob in the first place.)
            gk = f"{kind}.{group}" if group else kind
            raise RetryLater(f"panic: unsupported runtime: {gk} (nil runtime)")
        if not finished(status):
            try:
                self._apply(trainjob)
            except (ApiError, RetryLater) as exc:
                error = exc.message if isinstance(exc, ApiError) else str(exc)
                message = f"TrainJob resources reconciliation failed: {error[:950]}"
                if len(error) > 950:
                    message += " ..."
                self.api.record_event(
                    trainjob, "Warning", "TrainJobResourcesCreationFailed", message, COMPONENT
                )
        if spec.get("suspend"):
            set_condition(
                status,
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": SUSPENDED[0],
                    "message": SUSPENDED[1],
                },
            )
        elif is_true(status, "Suspended"):
            set_condition(
                status,
                {
                    "type": "Suspended",
                    "status": "False",
                    "reason": RESUMED[0],
                    "message": RESUMED[1],
                },
            )
        missing = self._jobset_status(trainjob, status)
        requeue = self._deadline(trainjob, status)
        if status.get("conditions") == []:
            status.pop("conditions")
        if status != old:

            def write(obj: Obj) -> None:
                reported = (obj.get("status") or {}).get("trainerStatus")  # not this loop's field
                obj["status"] = {**status, "trainerStatus": reported} if reported else status

            self.api.mutate(self.kinds.trainjobs, namespace, name, write)
        if error is not None or missing:
            raise RetryLater(error or "the JobSet is not there yet")
        return requeue

    # --- objects -------------------------------------------------------------------------

    def _runtime(self, trainjob: Obj) -> Obj:
        """The runtime from the TrainJob's snapshot, or (the first time) from the API."""
        meta = trainjob["metadata"]
        ref = trainjob["spec"].get("runtimeRef") or {}
        kind, _ = runtime_kind(ref)
        snapshot = self.api.store.get(
            CONFIGMAPS.key, meta["namespace"], meta["name"] + SNAPSHOT_SUFFIX
        )
        if snapshot is not None:
            owner = controller_of(snapshot, "TrainJob")
            if owner is None or owner.get("uid") != meta["uid"]:
                raise RetryLater(
                    "unable to get runtime snapshot: invalid runtime snapshot: a snapshot "
                    "configmap exists but is owned by another object"
                )
            runtime = yaml.safe_load((snapshot.get("data") or {}).get("runtime", "")) or {}
            if runtime.get("kind") != kind or runtime.get("metadata", {}).get("name") != ref.get(
                "name"
            ):
                raise RetryLater(
                    "unable to get runtime snapshot: invalid runtime snapshot: the snapshot refers "
                    "to the wrong runtime"
                )
            return dict(runtime)
        runtime = self.webhooks.runtime_of(trainjob)
        if runtime is None:
            resource = (
                self.kinds.clustertrainingruntimes
                if kind == CLUSTER_KIND
                else self.kinds.trainingruntimes
            )
            raise RetryLater(
                f'{_NOT_FOUND[kind]}: {resource.qualified} "{ref.get("name", "")}" not found'
            )
        snapshot = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": meta["name"] + SNAPSHOT_SUFFIX,
                "namespace": meta["namespace"],
                "ownerReferences": [owner_ref(trainjob)],
            },
            "data": {"runtime": yaml.safe_dump(runtime, sort_keys=True, default_flow_style=False)},
        }
        try:
            self.api.create(CONFIGMAPS, meta["namespace"], snapshot)
        except ApiError as exc:
            if exc.code != 409:
                raise RetryLater(f"creating runtime snapshot: {exc.message}") from None
        return runtime

    def _apply(self, trainjob: Obj) -> None:
        """Build the JobSet and apply it (created once; updated only around a suspension)."""
        meta = trainjob["metadata"]
        current = self.api.store.get(JOBSETS.key, meta["namespace"], meta["name"])
        suspended = bool(trainjob["spec"].get("suspend"))
        runtime = self._runtime(trainjob)
        if current is not None and not suspended and not current["spec"].get("suspend"):
            return
        jobset = build_jobset(trainjob, runtime)
        for plugin in self.plugins:
            plugin(trainjob, jobset)
        if current is None:
            try:
                self.api.create(JOBSETS, meta["namespace"], jobset)
            except ApiError as exc:
                if exc.code != 409:
                    raise
            return
        updated = deep(current)
        for field in ("labels", "annotations"):
            values = {
                **(current["metadata"].get(field) or {}),
                **(jobset["metadata"].get(field) or {}),
            }
            if values:
                updated["metadata"][field] = values
        updated["metadata"]["ownerReferences"] = jobset["metadata"]["ownerReferences"]
        updated["spec"] = jobset["spec"]
        updated["metadata"].pop("resourceVersion", None)
        self.api.replace(JOBSETS, meta["namespace"], meta["name"], updated)

    # --- status --------------------------------------------------------------------------

    def _jobset_status(self, trainjob: Obj, status: Obj) -> bool:
        """Copy the JobSet's end and its replicated jobs' counts; True when it is missing."""
        meta = trainjob["metadata"]
        jobset = self.api.store.get(JOBSETS.key, meta["namespace"], meta["name"])
        if jobset is None:
            return not finished(status)
        js_status = jobset.get("status") or {}
        for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
            cond = find(js_status, source)
            if cond is not None and cond.get("status") == "True":
                set_condition(status, {**cond, "type": target})
        statuses = [
            {
                "name": s["name"],
                "ready": s.get("ready", 0),
                "succeeded": s.get("succeeded", 0),
                "failed": s.get("failed", 0),
                "active": s.get("active", 0),
                "suspended": s.get("suspended", 0),
            }
            for s in js_status.get("replicatedJobsStatus", [])
        ]
        if statuses:
            status["jobsStatus"] = statuses
        else:
            status.pop("jobsStatus", None)
        return False

    def _deadline(self, trainjob: Obj, status: Obj) -> float | None:
        spec = trainjob.get("spec") or {}
        deadline = spec.get("activeDeadlineSeconds")
        if not deadline or finished(status) or spec.get("suspend"):
            return None
        start = parse_time(trainjob["metadata"]["creationTimestamp"])
        suspended = find(status, "Suspended")
        if suspended is not None and suspended.get("status") == "False":
            start = parse_time(suspended["lastTransitionTime"])
        left = start + int(deadline) - time.time()
        if left > 0:
            return left
        reason, message = DEADLINE_EXCEEDED
        set_condition(
            status, {"type": "Failed", "status": "True", "reason": reason, "message": message}
        )
        meta = trainjob["metadata"]
        try:
            self.api.delete(JOBSETS, meta["namespace"], meta["name"])
        except ApiError:
            pass
        return None


def default_runtime() -> Obj:
    """The ``torch-distributed`` ClusterTrainingRuntime of Trainer v2.3.0's manifests."""
    from ..crd_schema import CRD_DIR

    path = CRD_DIR / "torch_distributed.clustertrainingruntime.yaml"
    with path.open(encoding="utf-8") as fh:
        runtime = yaml.safe_load(fh)
    assert isinstance(runtime, dict)
    return runtime


def jax_runtime() -> Obj:
    """The ``jax-distributed`` ClusterTrainingRuntime, in the shape of ``torch-distributed``:
    the framework label ``jax``, ``mlPolicy.jax``, NVIDIA's JAX image (as Trainer's manifests
    install it)."""
    runtime = default_runtime()
    runtime["metadata"] = {
        "name": "jax-distributed",
        "labels": {"trainer.kubeflow.org/framework": "jax"},
    }
    runtime["spec"]["mlPolicy"] = {"numNodes": 1, "jax": {}}
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            container["image"] = "nvcr.io/nvidia/jax:25.10-py3"
    return runtime
