"""Kubeflow Trainer v2 (v2.3.0): the JobSet a TrainJob and its runtime make.

The runtime's JobSet template with ``spec.runtimePatches`` merged in, the
trainer step's node count and ``resourcesPerNode``, the torch plugin's
``PET_*`` variables and port, the JAX plugin's ``JAX_*`` variables and port,
PlainML's env and the initializer steps (see
``trainjob.py`` for the whole contract).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .jobset import API_VERSION as JOBSET_API_VERSION
from .loop import RetryLater, owner_ref
from .meta import Obj, deep
from .strategic import strategic_merge
from .trainer import (
    ANCESTOR_TRAINER,
    COMPLETION_INDEX_PATH,
    DATASET_INITIALIZER,
    LABEL_ANCESTOR,
    MODEL_INITIALIZER,
    NODE,
    STORAGE_URI,
    TORCHTUNE,
    TRAINER_PORT,
)

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
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


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


def containers_of(rjob: Obj) -> list[Obj]:
    """A replicated job's pod containers (none when its template has none)."""
    return list(
        rjob.get("template", {})
        .get("spec", {})
        .get("template", {})
        .get("spec", {})
        .get("containers", [])
    )


def pod_spec_of(rjob: Obj) -> Obj:
    """A replicated job's pod spec, created empty where missing."""
    job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
    spec: Obj = job_spec.setdefault("template", {}).setdefault("spec", {})
    return spec


def ancestor_of(rjob: Obj) -> str | None:
    """The ``trainjob-ancestor-step`` label of a replicated job's template."""
    labels = (rjob.get("template", {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_ANCESTOR)
    return str(value) if value is not None else None


def _node_container(rjob: Obj) -> Obj | None:
    return next((c for c in pod_spec_of(rjob).get("containers", []) if c.get("name") == NODE), None)


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
        ancestor = ancestor_of(rjob)
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
    elif (ml_policy or {}).get("jax") is not None:
        _jax(trainjob, trainer_rjob, counts)
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
        if ancestor_of(rjob) != ANCESTOR_TRAINER:
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
        if rjob.get("name") == NODE or ancestor_of(rjob) == ANCESTOR_TRAINER:
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
            pod: Obj = pod_spec_of(job) if job is not None else {}
            candidates: list[Obj] = pod.get("containers", []) + pod.get("initContainers", [])
            found = next((c for c in candidates if c.get("name") == container_name), None)
            if found is None:
                raise RetryLater(
                    f'envInjection target podSet "{target.get("jobName")}" container '
                    f'"{container_name}" not found in runtime template'
                )
            upsert_env(found.setdefault("env", []), *pet)
            upsert_env(found["env"], *master)


def _jax(trainjob: Obj, trainer_rjob: Obj | None, counts: dict[str, int]) -> None:
    """The JAX plugin's ``EnforceMLPolicy``: one process per pod, told its cluster by env."""
    name = trainjob["metadata"]["name"]
    trainer = trainjob.get("spec", {}).get("trainer")
    if trainer_rjob is None:
        return
    if trainer is not None and trainer.get("numNodes") is not None:
        counts[trainer_rjob["name"]] = int(trainer["numNodes"])
    container = _node_container(trainer_rjob) if trainer is not None else None
    if container is None or trainer is None:
        return
    env = container.setdefault("env", [])
    upsert_env(env, *trainer.get("env", []))
    upsert_env(
        env,
        {"name": "JAX_NUM_PROCESSES", "value": str(counts[trainer_rjob["name"]])},
        {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}}},
        {"name": "JAX_COORDINATOR_ADDRESS", "value": f"{name}-{NODE}-0-0.{name}:{TRAINER_PORT}"},
    )
    upsert_port(container.setdefault("ports", []), {"containerPort": TRAINER_PORT})


def _initializers(spec: Obj, rjobs: list[Obj]) -> None:
    """The builder's dataset and model initializer steps."""
    initializer = spec.get("initializer") or {}
    for ancestor, key in ((DATASET_INITIALIZER, "dataset"), (MODEL_INITIALIZER, "model")):
        for rjob in rjobs:
            if ancestor_of(rjob) != ancestor:
                continue
            rjob["replicas"] = 1
            config = initializer.get(key)
            if config is None:
                continue
            for container in pod_spec_of(rjob).get("containers", []):
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
