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

import math
import re
import time
from dataclasses import dataclass
from typing import Any

import yaml

from .apiserver import ApiServer
from .jobset import API_VERSION as JOBSET_API_VERSION
from .loop import ControlLoop, Key, RetryLater, controller_of, owner_ref
from .meta import ApiError, Obj, deep, now, parse_time
from .resources import CONFIGMAPS, JOBSETS, Resource
from .store import Event
from .strategic import strategic_merge

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
_NOT_FOUND = {
    CLUSTER_KIND: "not found ClusterTrainingRuntime specified in TrainJob",
    NAMESPACED_KIND: "TrainingRuntime specified in TrainJob is not found",
}


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


# --- field errors as Go prints them -------------------------------------------------------------


def _pointer() -> str:
    return f"0x{0xC000100000 + (time.monotonic_ns() // 8 % 0xFFFFF) * 8:x}"


def _go_runtime_ref(ref: Obj) -> str:
    """``%#v`` of a ``RuntimeRef`` (its pointers printed as addresses, as Go does)."""
    fields = [f'Name:"{ref.get("name", "")}"']
    for go_name, key in (("APIGroup", "apiGroup"), ("Kind", "kind")):
        fields.append(f"{go_name}:(*string)({_pointer() if key in ref else 'nil'})")
    return "v1alpha1.RuntimeRef{" + ", ".join(fields) + "}"


def _go_value(type_name: str, value: Any) -> str:
    """An abbreviated ``%#v``: the Go type and the value's JSON."""
    import json

    return f"{type_name}{json.dumps(value, separators=(',', ':'))}"


def field_error(path: str, kind: str, detail: str, value: str | None = None) -> str:
    """``field.Error.Error()``: ``path: Invalid value: <value>: detail``."""
    body = {"Invalid": "Invalid value", "Forbidden": "Forbidden", "Internal": "Internal error"}[
        kind
    ]
    if value is not None and kind == "Invalid":
        body = f"{body}: {value}"
    return f"{path}: {body}: {detail}"


def deny(webhook: str, errors: list[str]) -> ApiError:
    """What the API server answers when a controller-runtime webhook returns errors (403)."""
    text = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return ApiError(403, "Forbidden", f'admission webhook "{webhook}" denied the request: {text}')


# --- env, ports, resources ----------------------------------------------------------------------


def upsert_env(env: list[Obj], *items: Obj) -> None:
    """``apply.UpsertEnvVars``: replace a variable of the same name in place, else append."""
    for item in items:
        index = next((i for i, e in enumerate(env) if e.get("name") == item.get("name")), None)
        if index is None:
            env.append(deep(item))
        else:
            env[index] = deep(item)


def upsert_port(ports: list[Obj], port: Obj) -> None:
    """``apply.UpsertPort``: the same port number, or the same name (two unnamed ports too)."""
    for index, current in enumerate(ports):
        if current.get("containerPort") == port.get("containerPort") or current.get(
            "name"
        ) == port.get("name"):
            ports[index] = deep(port)
            return
    ports.append(deep(port))


_SUFFIXES = {
    "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


def quantity(value: Any) -> float:
    """A resource quantity (``2``, ``500m``, ``1Gi``, ``1e3``) as a number."""
    text = str(value).strip()
    match = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", text)
    if not match:
        return 0.0
    number, suffix = match.groups()
    return float(number) * _SUFFIXES.get(suffix, 1.0)


def _whole(value: Any) -> int:
    """``Quantity.Value()``: rounded up, away from zero."""
    number = quantity(value)
    return math.ceil(number) if number >= 0 else -math.ceil(-number)


def gpus(resources: Obj) -> int:
    """``GetNumGPUPerNode``: the first resource whose name mentions gpu (requests, then limits)."""

    def count(values: Obj) -> int:
        for name, value in (values or {}).items():
            if "gpu" in name.lower():
                return _whole(value)
        return 0

    return count(resources.get("requests") or {}) or count(resources.get("limits") or {})


def cpus(resources: Obj) -> int:
    """``getNumCPUPerNode``: the CPU request, else the CPU limit."""
    request = (resources.get("requests") or {}).get("cpu")
    if request is not None and quantity(request) != 0:
        return _whole(request)
    limit = (resources.get("limits") or {}).get("cpu")
    return _whole(limit) if limit is not None else 0


def merge_resources(base: Obj, override: Obj) -> Obj:
    """``MergeResourceRequirements``: limits and requests by key, claims by name."""
    merged = strategic_merge(base or {}, override or {})
    return merged if isinstance(merged, dict) else {}


# --- building the JobSet ------------------------------------------------------------------------


def _containers(rjob: Obj) -> list[Obj]:
    return list(
        rjob.get("template", {})
        .get("spec", {})
        .get("template", {})
        .get("spec", {})
        .get("containers", [])
    )


def _pod_spec(rjob: Obj) -> Obj:
    job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
    pod_spec: Obj = job_spec.setdefault("template", {}).setdefault("spec", {})
    return pod_spec


def _ancestor(rjob: Obj) -> str | None:
    labels = (rjob.get("template", {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_ANCESTOR)
    return str(value) if value is not None else None


def _node_container(rjob: Obj) -> Obj | None:
    return next((c for c in _pod_spec(rjob).get("containers", []) if c.get("name") == NODE), None)


def build_jobset(trainjob: Obj, runtime: Obj) -> Obj:
    """The JobSet the TrainJob's runtime and ``spec`` make (the runtime framework's plugins)."""
    spec = trainjob.get("spec", {})
    trainer = spec.get("trainer")
    template = deep(runtime.get("spec", {}).get("template", {}))
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    js_spec: Obj = template.get("spec") or {}
    order = {r.get("name"): i for i, r in enumerate(js_spec.get("replicatedJobs", []))}
    for patch in spec.get("runtimePatches", []):
        patch_template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        patch_meta = patch_template.get("metadata") or {}
        labels.update(patch_meta.get("labels") or {})
        annotations.update(patch_meta.get("annotations") or {})
        if patch_template.get("spec") is not None:
            js_spec = strategic_merge(js_spec, patch_template["spec"])
    js_spec["replicatedJobs"] = sorted(
        js_spec.get("replicatedJobs", []), key=lambda r: order.get(r.get("name"), 0)
    )
    ml_policy = runtime.get("spec", {}).get("mlPolicy")
    rjobs = js_spec["replicatedJobs"]

    # Pod sets: the trainer step runs numNodes pods; resourcesPerNode goes on its node container.
    counts: dict[str, int] = {}
    trainer_rjob: Obj | None = None
    for rjob in rjobs:
        count = int(rjob.get("template", {}).get("spec", {}).get("parallelism") or 1)
        ancestor = _ancestor(rjob)
        if ancestor == ANCESTOR_TRAINER and ml_policy is not None:
            count = int(ml_policy.get("numNodes") or 1)
        if ancestor == ANCESTOR_TRAINER and trainer_rjob is None:
            trainer_rjob = rjob
        launcher = (
            ml_policy is not None
            and (ml_policy.get("mpi") or {}).get("runLauncherAsNode")
            and rjob.get("name") == NODE
        )
        per_node = (trainer or {}).get("resourcesPerNode")
        if per_node is not None and (
            (ancestor == ANCESTOR_TRAINER and ml_policy is not None) or launcher
        ):
            container = _node_container(rjob)
            if container is not None:
                container["resources"] = merge_resources(container.get("resources") or {}, per_node)
        counts[rjob["name"]] = max(count, 1)

    torch = (ml_policy or {}).get("torch")
    others = any((ml_policy or {}).get(k) is not None for k in ("torch", "mpi", "jax"))
    if torch is not None:
        _torch(trainjob, ml_policy or {}, rjobs, trainer_rjob, counts)
    elif not others and trainer is not None and trainer_rjob is not None:
        # PlainML: numNodes and the trainer's env.
        if trainer.get("numNodes") is not None:
            counts[trainer_rjob["name"]] = int(trainer["numNodes"])
        container = _node_container(trainer_rjob)
        if container is not None:
            upsert_env(container.setdefault("env", []), *trainer.get("env", []))

    # SyncParallelCount, then the builder's initializer and trainer steps.
    for rjob in rjobs:
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = counts[rjob["name"]]
    _initializers(spec, rjobs)
    for rjob in rjobs:
        if _ancestor(rjob) != ANCESTOR_TRAINER:
            continue
        rjob["replicas"] = 1
        container = _node_container(rjob)
        if container is not None and trainer is not None:
            for field in ("image", "command", "args"):
                if trainer.get(field) is not None:
                    container[field] = deep(trainer[field])
            upsert_env(container.setdefault("env", []), *trainer.get("env", []))
    if "suspend" in spec:
        js_spec["suspend"] = bool(spec["suspend"])
    jobset_meta: Obj = {
        "name": trainjob["metadata"]["name"],
        "namespace": trainjob["metadata"]["namespace"],
        "ownerReferences": [owner_ref(trainjob)],
    }
    if labels:
        jobset_meta["labels"] = labels
    if annotations:
        jobset_meta["annotations"] = annotations
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": jobset_meta,
        "spec": js_spec,
    }


def _torch(
    trainjob: Obj,
    ml_policy: Obj,
    rjobs: list[Obj],
    trainer_rjob: Obj | None,
    counts: dict[str, int],
) -> None:
    """The torch plugin's ``EnforceMLPolicy``."""
    name = trainjob["metadata"]["name"]
    trainer = trainjob.get("spec", {}).get("trainer")
    if trainer_rjob is not None and trainer is not None and trainer.get("numNodes") is not None:
        counts[trainer_rjob["name"]] = int(trainer["numNodes"])
    nproc = "auto"
    if trainer is not None and trainer.get("numProcPerNode") is not None:
        nproc = str(int(trainer["numProcPerNode"]))
    resources: Obj = {}
    for rjob in rjobs:
        if rjob.get("name") == NODE or _ancestor(rjob) == ANCESTOR_TRAINER:
            container = _node_container(rjob)
            if container is not None and container.get("resources") is not None:
                resources = container["resources"]
                break
    if trainer is not None and trainer.get("resourcesPerNode") is not None:
        resources = trainer["resourcesPerNode"]
    gpu = gpus(resources)
    if nproc == "auto" and gpu == 0:
        nproc = str(max(1, cpus(resources)))
    nodes = counts[trainer_rjob["name"]] if trainer_rjob is not None else 1
    pet: list[Obj] = [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": nproc},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}},
    ]
    master: list[Obj] = [
        {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
    ]
    container = (
        _node_container(trainer_rjob) if trainer is not None and trainer_rjob is not None else None
    )
    if container is not None and trainer is not None:
        env = container.setdefault("env", [])
        upsert_env(env, *trainer.get("env", []))
        upsert_env(env, *pet)
        if list(trainer.get("command") or []) != TORCHTUNE:
            upsert_env(env, *master)
        upsert_port(container.setdefault("ports", []), {"containerPort": TRAINER_PORT})
    injection = (ml_policy.get("torch") or {}).get("envInjection") or {}
    for target in injection.get("targets", []):
        job: Obj | None = next((r for r in rjobs if r.get("name") == target.get("jobName")), None)
        for container_name in target.get("containerNames", []):
            pod: Obj = _pod_spec(job) if job is not None else {}
            candidates: list[Obj] = pod.get("containers", []) + pod.get("initContainers", [])
            found = next((c for c in candidates if c.get("name") == container_name), None)
            if found is None:
                raise RetryLater(
                    f'envInjection target podSet "{target.get("jobName")}" container '
                    f'"{container_name}" not found in runtime template'
                )
            upsert_env(found.setdefault("env", []), *pet)
            upsert_env(found["env"], *master)


def _initializers(spec: Obj, rjobs: list[Obj]) -> None:
    """The builder's dataset and model initializer steps."""
    initializer = spec.get("initializer") or {}
    for ancestor, key in ((DATASET_INITIALIZER, "dataset"), (MODEL_INITIALIZER, "model")):
        for rjob in rjobs:
            if _ancestor(rjob) != ancestor:
                continue
            rjob["replicas"] = 1
            config = initializer.get(key)
            if config is None:
                continue
            for container in _pod_spec(rjob).get("containers", []):
                if container.get("name") != ancestor:
                    continue
                env = container.setdefault("env", [])
                if config.get("storageUri") is not None:
                    upsert_env(env, {"name": STORAGE_URI, "value": config["storageUri"]})
                upsert_env(env, *config.get("env", []))
                if config.get("secretRef") is not None:
                    container.setdefault("envFrom", []).append(
                        {"secretRef": {"name": config["secretRef"].get("name", "")}}
                    )


# --- webhooks and CRD rules --------------------------------------------------------------------

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def _runtime_kind(ref: Obj) -> tuple[str, str]:
    return str(ref.get("kind", CLUSTER_KIND)), str(ref.get("apiGroup", GROUP))


def trainjob_rules(trainjob: Obj, old: Obj | None) -> list[Obj]:
    """The TrainJob CRD's CEL rules (``x-kubernetes-validations``) as 422 causes."""
    causes: list[Obj] = []
    name = trainjob["metadata"].get("name", "")
    for ok, message in (
        (_DNS1035.match(name) is not None, "metadata.name must match RFC 1035 DNS label format"),
        (len(name) <= 63, "metadata.name must be no more than 63 characters"),
    ):
        if not ok:
            causes.append(
                {"reason": "FieldValueInvalid", "message": f'Invalid value: "object": {message}'}
            )
    spec = trainjob.get("spec") or {}
    managed = spec.get("managedBy")
    if managed is not None and managed not in (CONTROLLER_NAME, MULTIKUEUE):
        message = (
            f'Invalid value: "string": ManagedBy must be {CONTROLLER_NAME} or {MULTIKUEUE} if set'
        )
        causes.append(
            {"reason": "FieldValueInvalid", "message": message, "field": "spec.managedBy"}
        )
    if old is not None:
        old_spec = old.get("spec") or {}
        for field, kind in (
            ("runtimeRef", "object"),
            ("initializer", "object"),
            ("trainer", "object"),
            ("managedBy", "string"),
            ("activeDeadlineSeconds", "integer"),
        ):
            if field in spec and field in old_spec and spec[field] != old_spec[field]:
                causes.append(
                    {
                        "reason": "FieldValueInvalid",
                        "message": f'Invalid value: "{kind}": field is immutable',
                        "field": f"spec.{field}",
                    }
                )
    return causes


class TrainerWebhooks:
    """The Trainer's admission webhooks (mutating and validating) for TrainJobs and runtimes."""

    def __init__(self, api: ApiServer, kinds: TrainerKinds) -> None:
        self.api, self.kinds = api, kinds

    def install(self) -> None:
        self.api.mutating.setdefault(self.kinds.trainjobs.key, []).append(self.default_trainjob)
        self.api.validating.setdefault(self.kinds.trainjobs.key, []).append(self.validate_trainjob)
        for resource in (self.kinds.trainingruntimes, self.kinds.clustertrainingruntimes):
            self.api.validating.setdefault(resource.key, []).append(self.validate_runtime)

    # --- TrainJob ------------------------------------------------------------------------

    @staticmethod
    def default_trainjob(operation: str, trainjob: Obj, old: Obj | None) -> None:
        """``defaulter.trainjob.trainer.kubeflow.org``: each runtime patch's ``time``."""
        stamp = now()
        patches = (trainjob.get("spec") or {}).get("runtimePatches") or []
        previous = {
            p.get("manager"): p for p in ((old or {}).get("spec") or {}).get("runtimePatches") or []
        }
        for patch in patches:
            before = previous.get(patch.get("manager"))
            if old is None or before is None:
                patch.setdefault("time", stamp)
                continue
            same = {k: v for k, v in before.items() if k != "time"} == {
                k: v for k, v in patch.items() if k != "time"
            }
            if same and before.get("time"):
                patch["time"] = before["time"]
            else:
                patch["time"] = stamp

    def runtime_of(self, trainjob: Obj) -> Obj | None:
        ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
        kind, _ = _runtime_kind(ref)
        if kind == CLUSTER_KIND:
            return self.api.store.get(
                self.kinds.clustertrainingruntimes.key, "", ref.get("name", "")
            )
        namespace = trainjob["metadata"].get("namespace", "")
        return self.api.store.get(self.kinds.trainingruntimes.key, namespace, ref.get("name", ""))

    def validate_trainjob(self, operation: str, trainjob: Obj, old: Obj | None) -> list[str]:
        """``validator.trainjob.trainer.kubeflow.org``."""
        webhook = "validator.trainjob.trainer.kubeflow.org"
        spec = trainjob.get("spec") or {}
        ref = spec.get("runtimeRef") or {}
        kind, group = _runtime_kind(ref)
        if group != GROUP or kind not in (CLUSTER_KIND, NAMESPACED_KIND):
            raise deny(
                webhook,
                [
                    f"unsupported runtime: {kind}.{group}"
                    if group
                    else f"unsupported runtime: {kind}"
                ],
            )
        runtime = self.runtime_of(trainjob)
        if runtime is None:
            resource = (
                self.kinds.clustertrainingruntimes
                if kind == CLUSTER_KIND
                else self.kinds.trainingruntimes
            )
            lowered = "clusterTrainingRuntime" if kind == CLUSTER_KIND else "trainingRuntime"
            path = "spec.RuntimeRef" if kind == CLUSTER_KIND else "spec.runtimeRef"
            detail = (
                f'{resource.qualified} "{ref.get("name", "")}" not found: specified {lowered} '
                "must be created before the TrainJob is created"
            )
            raise deny(webhook, [field_error(path, "Invalid", detail, _go_runtime_ref(ref))])
        warnings: list[str] = []
        if (
            kind == CLUSTER_KIND
            and (runtime["metadata"].get("labels") or {}).get(LABEL_SUPPORT) == "deprecated"
        ):
            warnings.append(
                f'Referenced ClusterTrainingRuntime "{runtime["metadata"]["name"]}" is deprecated '
                "and will be removed in a future release of Kubeflow Trainer. See runtime "
                f"deprecation policy: {DEPRECATION_URL}"
            )
        errors = self._plugin_errors(trainjob, old, runtime)
        if errors:
            raise deny(webhook, errors)
        return warnings

    def _plugin_errors(self, trainjob: Obj, old: Obj | None, runtime: Obj) -> list[str]:
        """The torch and JobSet plugins' ``Validate``."""
        errors: list[str] = []
        spec = trainjob.get("spec") or {}
        ref_value = _go_runtime_ref(spec.get("runtimeRef") or {})
        ml_policy = runtime.get("spec", {}).get("mlPolicy") or {}
        template_spec = runtime.get("spec", {}).get("template", {}).get("spec", {})
        rjobs = {r.get("name"): r for r in template_spec.get("replicatedJobs", [])}
        names = {
            name: {
                c.get("name")
                for c in _pod_spec(deep(r)).get("initContainers", [])
                + _pod_spec(deep(r)).get("containers", [])
            }
            for name, r in rjobs.items()
        }
        if ml_policy.get("torch") is not None:
            injection = (ml_policy["torch"] or {}).get("envInjection") or {}
            for target in injection.get("targets", []):
                for container in target.get("containerNames", []):
                    if container not in names.get(target.get("jobName"), set()):
                        detail = (
                            f'envInjection target podSet "{target.get("jobName")}" container '
                            f'"{container}" not found in runtime template'
                        )
                        value = _go_value("v1alpha1.EnvInjectionTarget", target)
                        errors.append(field_error("spec.runtimeRef", "Invalid", detail, value))
            trainer = spec.get("trainer") or {}
            reserved = sorted({e.get("name") for e in trainer.get("env", [])} & set(TORCH_ENV))
            if reserved:
                detail = (
                    "must not have reserved envs, invalid envs configured: ["
                    + " ".join(reserved)
                    + "]"
                )
                value = _go_value("[]v1.EnvVar", trainer.get("env", []))
                errors.append(field_error("spec.trainer.env", "Invalid", detail, value))
        initializer = spec.get("initializer") or {}
        for key, step in (("dataset", DATASET_INITIALIZER), ("model", MODEL_INITIALIZER)):
            if initializer.get(key) is None:
                continue
            config = "datasetConfig" if key == "dataset" else "modelConfig"
            if step not in names:
                detail = f"must have {step} job when trainJob is configured with input {config}"
            elif step not in names[step]:
                detail = f"must have container with name - {step} in the {step} job"
            elif not any(
                m.get("name") == VOLUME_INITIALIZER
                for c in _pod_spec(deep(rjobs[step])).get("containers", [])
                if c.get("name") == step
                for m in c.get("volumeMounts", [])
            ):
                detail = (
                    f"must have volumeMount with name - {VOLUME_INITIALIZER} in container "
                    f"{step} of the {step} job"
                )
            else:
                continue
            errors.append(field_error("spec.runtimeRef", "Invalid", detail, ref_value))
        errors += self._patch_errors(trainjob, old, names)
        return errors

    def _patch_errors(
        self, trainjob: Obj, old: Obj | None, names: dict[Any, set[Any]]
    ) -> list[str]:
        errors: list[str] = []
        spec = trainjob.get("spec") or {}
        patches = spec.get("runtimePatches") or []
        value = _go_value("[]v1alpha1.RuntimePatch", patches)
        if old is not None:
            old_spec = old.get("spec") or {}

            def strip(items: list[Obj]) -> list[Obj]:
                return [{k: v for k, v in p.items() if k != "time"} for p in items]

            if strip(old_spec.get("runtimePatches") or []) != strip(patches):
                if not old_spec.get("suspend") and not spec.get("suspend"):
                    errors.append(
                        field_error(
                            "spec.runtimePatches",
                            "Forbidden",
                            "RuntimePatches can only be modified when the TrainJob is "
                            "suspended before or after the update",
                        )
                    )
                else:
                    meta = trainjob["metadata"]
                    jobset = self.api.store.get(
                        JOBSETS.key, meta.get("namespace", ""), meta["name"]
                    )
                    for status in ((jobset or {}).get("status") or {}).get(
                        "replicatedJobsStatus", []
                    ):
                        if status.get("active", 0) > 0:
                            errors.append(
                                field_error(
                                    "spec.runtimePatches",
                                    "Forbidden",
                                    "RuntimePatches cannot be modified when the JobSet's "
                                    f"ReplicatedJob {status['name']} is still active",
                                )
                            )
        for patch in patches:
            manager = str(patch.get("manager", ""))
            if not _domain_prefixed_path(manager):
                errors.append(
                    field_error(
                        "spec.runtimePatches.manager",
                        "Invalid",
                        'must be a domain-prefixed path (such as "acme.io/foo")',
                        f'"{manager}"',
                    )
                )
            template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
            for rjob in (template or {}).get("replicatedJobs", []):
                containers = names.get(rjob.get("name"))
                if containers is None:
                    errors.append(
                        field_error(
                            "spec.runtimePatches",
                            "Invalid",
                            "must not have replicated job that doesn't exist in the runtime job "
                            "template",
                            value,
                        )
                    )
                    continue
                pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                    "spec"
                ) or {}
                for container in pod.get("initContainers", []):
                    if container.get("name") not in containers:
                        errors.append(
                            field_error(
                                "spec.runtimePatches",
                                "Invalid",
                                "must not have initContainer that doesn't exist in the runtime "
                                f"job {rjob['name']}",
                                value,
                            )
                        )
                for container in pod.get("containers", []):
                    if container.get("name") not in containers:
                        detail = (
                            "must not have container that doesn't exist in the runtime job "
                            f"{rjob['name']}"
                        )
                    elif container.get("env") and container.get("name") in (
                        DATASET_INITIALIZER,
                        MODEL_INITIALIZER,
                        NODE,
                    ):
                        detail = (
                            f"must not have envs for the {DATASET_INITIALIZER}, "
                            f"{MODEL_INITIALIZER}, {NODE} containers"
                        )
                    else:
                        continue
                    errors.append(field_error("spec.runtimePatches", "Invalid", detail, value))
        return errors

    # --- runtimes ------------------------------------------------------------------------

    @staticmethod
    def validate_runtime(operation: str, runtime: Obj, old: Obj | None) -> list[str]:
        """``validator.(cluster)trainingruntime.trainer.kubeflow.org`` (on create)."""
        if operation != "CREATE":
            return []
        kind = runtime.get("kind", "TrainingRuntime")
        webhook = f"validator.{kind.lower()}.trainer.kubeflow.org"
        expected = {ANCESTOR_TRAINER: NODE, MODEL_INITIALIZER: MODEL_INITIALIZER}
        expected[DATASET_INITIALIZER] = DATASET_INITIALIZER
        errors: list[str] = []
        rjobs = (
            runtime.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
        )
        for index, rjob in enumerate(rjobs):
            ancestor = _ancestor(rjob)
            if ancestor not in expected:
                continue
            path = f"spec.template.spec.replicatedJobs[{index}]"
            if int(rjob.get("replicas", 1)) != 1:
                errors.append(
                    field_error(
                        f"{path}.replicas", "Invalid", "always must be 1", str(rjob["replicas"])
                    )
                )
            if not any(c.get("name") == expected[ancestor] for c in _containers(rjob)):
                errors.append(
                    field_error(
                        f"{path}.template.spec.template.spec.containers",
                        "Invalid",
                        f"must contain the required container for the ancestor: {ancestor}",
                        _go_value("[]v1.Container", _containers(rjob)),
                    )
                )
        if errors:
            raise deny(webhook, errors)
        return []


def _domain_prefixed_path(value: str) -> bool:
    """``validation.IsDomainPrefixedPath``."""
    host, slash, path = value.partition("/")
    return bool(slash and path and _DNS1123_SUBDOMAIN.match(host) and _PATH.match(path))


# --- the controller -----------------------------------------------------------------------------


class TrainJobController(ControlLoop):
    """The Trainer's TrainJob controller, with the torch, PlainML and JobSet plugins."""

    name = "trainjob-controller"

    def __init__(self, api: ApiServer, kinds: TrainerKinds) -> None:
        self.kinds = kinds
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
        kind, group = _runtime_kind(spec.get("runtimeRef") or {})
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
                obj["status"] = status

            self.api.mutate(self.kinds.trainjobs, namespace, name, write)
        if error is not None or missing:
            raise RetryLater(error or "the JobSet is not there yet")
        return requeue

    # --- objects -------------------------------------------------------------------------

    def _runtime(self, trainjob: Obj) -> Obj:
        """The runtime from the TrainJob's snapshot, or (the first time) from the API."""
        meta = trainjob["metadata"]
        ref = trainjob["spec"].get("runtimeRef") or {}
        kind, _ = _runtime_kind(ref)
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
