"""Kubeflow Trainer v2 (v2.3.0): the admission webhooks and the TrainJob CRD's rules.

The defaulter stamps ``runtimePatches[].time``; the validators refuse (403)
what ``trainjob.py``'s docstring lists; the CRD's CEL rules answer 422.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .apiserver import ApiServer
from .meta import ApiError, Obj, deep, now
from .resources import JOBSETS
from .trainer import (
    ANCESTOR_TRAINER,
    CLUSTER_KIND,
    CONTROLLER_NAME,
    DATASET_INITIALIZER,
    DEPRECATION_URL,
    GROUP,
    LABEL_SUPPORT,
    MODEL_INITIALIZER,
    MULTIKUEUE,
    NAMESPACED_KIND,
    NODE,
    TORCH_ENV,
    VOLUME_INITIALIZER,
    TrainerKinds,
    runtime_kind,
)
from .trainer_jobset import ancestor_of, containers_of, pod_spec_of

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


# --- webhooks and CRD rules --------------------------------------------------------------------

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


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
        kind, _ = runtime_kind(ref)
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
        kind, group = runtime_kind(ref)
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
                for c in pod_spec_of(deep(r)).get("initContainers", [])
                + pod_spec_of(deep(r)).get("containers", [])
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
                for c in pod_spec_of(deep(rjobs[step])).get("containers", [])
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
            ancestor = ancestor_of(rjob)
            if ancestor not in expected:
                continue
            path = f"spec.template.spec.replicatedJobs[{index}]"
            if int(rjob.get("replicas", 1)) != 1:
                errors.append(
                    field_error(
                        f"{path}.replicas", "Invalid", "always must be 1", str(rjob["replicas"])
                    )
                )
            if not any(c.get("name") == expected[ancestor] for c in containers_of(rjob)):
                errors.append(
                    field_error(
                        f"{path}.template.spec.template.spec.containers",
                        "Invalid",
                        f"must contain the required container for the ancestor: {ancestor}",
                        _go_value("[]v1.Container", containers_of(rjob)),
                    )
                )
        if errors:
            raise deny(webhook, errors)
        return []


def _domain_prefixed_path(value: str) -> bool:
    """``validation.IsDomainPrefixedPath``."""
    host, slash, path = value.partition("/")
    return bool(slash and path and _DNS1123_SUBDOMAIN.match(host) and _PATH.match(path))
