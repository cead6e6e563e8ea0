"""The Training Operator's (v1.9) frameworks, labels, conditions and pod settings.

What :mod:`operator`'s reconcile loop builds on: PyTorchJob and TFJob as
:class:`Framework` values, the operator's labels, its ``setCondition`` rules,
the in-memory defaults, the environment (``MASTER_ADDR``, ``PET_*``,
``TF_CONFIG``) and init container it gives pods, and reading a pod's phase.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .meta import Obj, deep, now

LABEL_OPERATOR = "training.kubeflow.org/operator-name"
LABEL_JOB = "training.kubeflow.org/job-name"
LABEL_TYPE = "training.kubeflow.org/replica-type"
LABEL_INDEX = "training.kubeflow.org/replica-index"
LABEL_ROLE = "training.kubeflow.org/job-role"
#: The value the operator gives PYTHONUNBUFFERED (any non-empty value unbuffers Python).
PYTHONUNBUFFERED = "1"
INIT_IMAGE = "alpine:3.10"


@dataclass(frozen=True)
class Framework:
    kind: str
    plural: str
    replicas_field: str
    container: str
    port_name: str
    default_port: int
    default_restart: str
    default_clean: str
    controller: str
    order: tuple[str, ...]


PYTORCH = Framework(
    "PyTorchJob",
    "pytorchjobs",
    "pytorchReplicaSpecs",
    "pytorch",
    "pytorchjob-port",
    23456,
    "OnFailure",
    "None",
    "pytorchjob-controller",
    ("Master", "Worker"),
)
TENSORFLOW = Framework(
    "TFJob",
    "tfjobs",
    "tfReplicaSpecs",
    "tensorflow",
    "tfjob-port",
    2222,
    "Never",
    "Running",
    "tfjob-controller",
    ("Chief", "Evaluator", "Master", "PS", "Worker"),
)
FRAMEWORKS = (PYTORCH, TENSORFLOW)


# --- conditions (the operator's setCondition / filterOutCondition) -----------------------------


def _condition(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    cond = _condition(status, kind)
    return bool(cond and cond.get("status") == "True")


def set_condition(status: Obj, kind: str, value: str, reason: str, message: str) -> None:
    """Add or update condition ``kind`` the way the operator does."""
    if is_true(status, "Failed"):
        return
    current = _condition(status, kind)
    if current and current["status"] == value and current.get("reason") == reason:
        return
    stamp = now()
    new = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }
    if current and current["status"] == value:
        new["lastTransitionTime"] = current["lastTransitionTime"]
    kept = []
    for cond in status.get("conditions", []):
        if {kind, cond["type"]} == {"Running", "Restarting"} or cond["type"] == kind:
            continue
        if kind in ("Failed", "Succeeded") and cond["type"] == "Running":
            cond = {**cond, "status": "False"}
        kept.append(cond)
    status["conditions"] = [*kept, new]


def finished(status: Obj) -> bool:
    return is_true(status, "Succeeded") or is_true(status, "Failed")


# --- defaults and pod templates ----------------------------------------------------------------


def with_defaults(fw: Framework, spec: Obj) -> Obj:
    """The job spec with the operator's in-memory defaults (nothing is written back)."""
    spec = deep(spec)
    run_policy = spec.setdefault("runPolicy", {})
    run_policy.setdefault("cleanPodPolicy", fw.default_clean)
    for replica in spec.get(fw.replicas_field, {}).values():
        replica.setdefault("replicas", 1)
        replica.setdefault("restartPolicy", fw.default_restart)
        containers = replica.get("template", {}).get("spec", {}).get("containers", [])
        for container in containers:
            if container.get("name") != fw.container:
                continue
            ports = container.setdefault("ports", [])
            if not any(p.get("name") == fw.port_name for p in ports):
                ports.append({"name": fw.port_name, "containerPort": fw.default_port})
    if fw is PYTORCH:
        elastic = spec.get("elasticPolicy")
        if elastic is not None:
            workers = spec.get(fw.replicas_field, {}).get("Worker", {}).get("replicas", 1)
            low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
            elastic["minReplicas"] = low if low is not None else (high or workers)
            elastic["maxReplicas"] = high if high is not None else (low or workers)
        if spec.get("nprocPerNode") is None and not (elastic or {}).get("nProcPerNode"):
            spec["nprocPerNode"] = "auto"
    return spec


def _port(fw: Framework, spec: Obj, rtype: str) -> int | None:
    replica = spec[fw.replicas_field].get(rtype, {})
    for container in replica.get("template", {}).get("spec", {}).get("containers", []):
        if container.get("name") == fw.container:
            for port in container.get("ports", []):
                if port.get("name") == fw.port_name:
                    return int(port["containerPort"])
    return None


def pytorch_env(name: str, spec: Obj, rtype: str, index: int) -> list[Obj]:
    """The variables the operator appends to every container of a PyTorchJob pod."""
    replicas = spec[PYTORCH.replicas_field]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc = str(spec.get("nprocPerNode") or "auto")
    env = [{"name": "PYTHONUNBUFFERED", "value": PYTHONUNBUFFERED}]
    if "Master" in replicas:
        port = str(_port(PYTORCH, spec, "Master"))
        master = f"{name}-master-0"
        rank = index + 1 if rtype == "Worker" else index
        world = total * (int(nproc) if nproc.isdigit() else 1)
        env += [
            {"name": "MASTER_PORT", "value": port},
            {"name": "PET_MASTER_PORT", "value": port},
            {"name": "MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "WORLD_SIZE", "value": str(world)},
            {"name": "RANK", "value": str(rank)},
            {"name": "PET_NPROC_PER_NODE", "value": nproc},
            {"name": "PET_NODE_RANK", "value": str(rank)},
        ]
    elastic = spec.get("elasticPolicy")
    if elastic is None:
        env.append({"name": "PET_NNODES", "value": str(total)})
        return env
    rdzv_host = elastic.get("rdzvHost") or f"{name}-worker-0"
    rdzv_port = elastic.get("rdzvPort") or _port(PYTORCH, spec, "Worker")
    env += [
        {"name": "PET_RDZV_ENDPOINT", "value": f"{rdzv_host}:{rdzv_port}"},
        {"name": "PET_RDZV_BACKEND", "value": elastic.get("rdzvBackend") or "c10d"},
        {"name": "PET_NNODES", "value": f"{elastic['minReplicas']}:{elastic['maxReplicas']}"},
    ]
    if elastic.get("maxRestarts") is not None:
        env.append({"name": "PET_MAX_RESTARTS", "value": str(elastic["maxRestarts"])})
    if elastic.get("nProcPerNode") is not None:
        env.append({"name": "PET_NPROC_PER_NODE", "value": str(elastic["nProcPerNode"])})
    if elastic.get("rdzvId") is not None:
        env.append({"name": "PET_RDZV_ID", "value": str(elastic["rdzvId"])})
    if elastic.get("rdzvConf"):
        conf = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
        env.append({"name": "PET_RDZV_CONF", "value": conf})
    if elastic.get("standalone"):
        env.append({"name": "PET_STANDALONE", "value": ""})
    return env


def tf_config(name: str, namespace: str, spec: Obj, rtype: str, index: int) -> str | None:
    """The ``TF_CONFIG`` of a TFJob task, or None for a single-task (non-distributed) job."""
    replicas = spec[TENSORFLOW.replicas_field]
    if sum(int(r.get("replicas", 1)) for r in replicas.values()) <= 1:
        return None
    cluster: dict[str, list[str]] = {}
    for kind in sorted(replicas, key=str.lower):
        if kind == "Evaluator":
            continue
        port = _port(TENSORFLOW, spec, kind)
        lower = kind.lower()
        cluster[lower] = [
            f"{name}-{lower}-{i}.{namespace}.svc:{port}"
            for i in range(int(replicas[kind].get("replicas", 1)))
        ]
    config = {
        "cluster": cluster,
        "task": {"type": rtype.lower(), "index": index},
        "environment": "cloud",
    }
    return json.dumps(config, separators=(",", ":"))


def _init_container(master: str) -> Obj:
    script = (
        f"err=1;for i in $(seq 100); do if nslookup {master}; then err=0 && break; fi;"
        "echo waiting for master; sleep 2; done; exit $err"
    )
    return {
        "name": "init-pytorch",
        "image": INIT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}},
        "command": ["sh", "-c", script],
    }


def replica_labels(fw: Framework, job: Obj, rtype: str, index: int, spec: Obj) -> dict[str, str]:
    """The operator's labels of replica ``rtype`` ``index`` (its pod and its Service)."""
    labels = {
        LABEL_OPERATOR: fw.controller,
        LABEL_JOB: job["metadata"]["name"],
        LABEL_TYPE: rtype.lower(),
        LABEL_INDEX: str(index),
    }
    replicas = spec[fw.replicas_field]
    if fw is PYTORCH:
        master = rtype == "Master" if "Master" in replicas else (rtype, index) == ("Worker", 0)
    else:
        chief = "Chief" in replicas or "Master" in replicas
        master = rtype in ("Chief", "Master") if chief else (rtype, index) == ("Worker", 0)
    if master:
        labels[LABEL_ROLE] = "master"
    return labels


def owner_reference(job: Obj) -> Obj:
    """The controller ``ownerReference`` the operator sets on a job's pods and Services."""
    meta = job["metadata"]
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- pods --------------------------------------------------------------------------------------


def _phase(pod: Obj) -> str:
    return str(pod.get("status", {}).get("phase", "Pending"))


def _type(pod: Obj) -> str:
    return str(pod["metadata"].get("labels", {}).get(LABEL_TYPE, ""))


def _active(pod: Obj) -> bool:
    return _phase(pod) not in ("Succeeded", "Failed") and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _exit_code(pod: Obj, container: str) -> int | None:
    for status in pod.get("status", {}).get("containerStatuses", []):
        terminated = status.get("state", {}).get("terminated")
        if status.get("name") == container and terminated:
            return int(terminated["exitCode"])
    return None
