"""Kubernetes objects for a job: the payload ConfigMap (or Secret) and a PyTorchJob or TFJob.

Pure: every function takes plain values and returns new plain dicts (JSON
types only, no ``kubernetes`` client models); nothing here does I/O.
:func:`manifests` gives the objects in creation order, payload first.

Every pod sees the same layout::

    /opt/disttrain/payload   payload files (runtime package + payload.pkl), read-only
    /opt/disttrain/pip       user base of the packages --pip installs (init container)
    /dev/shm                 memory-backed shared memory (unless --shm none)

and runs an exec-form command, never a shell: for PyTorch
``python -m torch.distributed.run --module jupyter_disttrain.runtime.worker
/opt/disttrain/payload/payload.pkl``, where torchrun takes nodes, rank,
rendezvous and processes per node from the ``PET_*`` environment the
training operator sets; for TensorFlow ``python -m
jupyter_disttrain.runtime.worker /opt/disttrain/payload/payload.pkl`` with the
operator's ``TF_CONFIG``. User text (cell, globals) only travels inside the
payload file; ``--pip`` requirements are separate argv items after ``--``.
"""

from __future__ import annotations

import base64
import json
import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..runtime import jobkey
from ..spec import JobSpec, SpecError
from ..units import format_bytes
from . import k8s_data
from .k8s_images import STOCK_IMAGES, ImagePolicy, default_image
from .k8s_kinds import BY_FRAMEWORK, PYTORCHJOB, TFJOB
from .k8s_labels import job_labels
from .k8s_metrics import PORT_NAME, metrics_env, metrics_objects
from .k8s_options import (
    RUNTIME_ROOT,
    SHM_PATH,
    ConflictingOptionsError,
    K8sOptions,
    is_dns_label,
)
from .k8s_pods import RUNAI_PROJECT_LABEL, RUNAI_SCHEDULER, host_port, pod_metadata
from .k8s_script import add_script_dir
from .k8s_yaml import render_yaml as render_yaml  # re-exported: manifests, then their file

Manifest = dict[str, Any]

KUBEFLOW_API: Final = PYTORCHJOB.api_version
MANAGED_BY: Final = "jupyter-disttrain"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_JOB: Final = "disttrain.jupyter.org/job"
ANNOTATION_NOTEBOOK: Final = "disttrain.jupyter.org/notebook"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"

PAYLOAD_DIR: Final = f"{RUNTIME_ROOT}/payload"
PIP_DIR: Final = f"{RUNTIME_ROOT}/pip"
#: The pod's own annotations (downward API): how the notebook asks rank 0 for the stacks.
PODINFO_DIR: Final = f"{RUNTIME_ROOT}/podinfo"
PAYLOAD_FILE: Final = "payload.pkl"
WORKER_MODULE: Final = "jupyter_disttrain.runtime.worker"
#: What the API server accepts in one ConfigMap or Secret (keys plus data).
MAX_PAYLOAD_BYTES: Final = 1024 * 1024

#: The training container of each framework: name, port name and port the operator expects.
_CONTAINERS: Final = {
    fw: (kind.container, kind.port_name, kind.port) for fw, kind in BY_FRAMEWORK.items()
}

_KEY_PART = re.compile(r"^[-_a-zA-Z0-9][-._a-zA-Z0-9]*$")


class PayloadTooLarge(SpecError):
    """The payload does not fit in one ConfigMap or Secret; nothing has been created."""

    def __init__(self, size: int, limit: int, files: Mapping[str, int], kind: str) -> None:
        self.size, self.limit = size, limit
        largest = sorted(files.items(), key=lambda item: -item[1])[:3]
        listing = ", ".join(f"{path} ({format_bytes(n)})" for path, n in largest)
        super().__init__(
            f"the job payload is {format_bytes(size)} ({size:,} bytes), over the "
            f"{format_bytes(limit)} ({limit:,} bytes) a {kind} can hold; largest files: "
            f"{listing}. Keep large data out of the notebook globals the cell uses: put it "
            "on a volume (--volume CLAIM:/data) or in object storage and load it inside the cell"
        )


# --- Names, labels, payload ----------------------------------------------------------------


def labels(name: str) -> dict[str, str]:
    """The labels on everything this tool creates for job ``name``."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: name}


def payload_name(name: str) -> str:
    """The name of job ``name``'s payload ConfigMap or Secret."""
    return f"{name}-payload"


def payload_items(paths: Iterable[str]) -> list[dict[str, str]]:
    """Volume ``items`` laying flat object keys out as the relative ``paths``, sorted.

    A key is the path with ``/`` replaced by ``.`` (keys cannot hold ``/``).
    Raises ValueError for an absolute path, ``.``/``..`` parts, characters a
    key cannot hold, or two paths that map to the same key.
    """
    items: dict[str, str] = {}
    for path in sorted(paths):
        parts = path.split("/")
        if any(part in ("", ".", "..") or not _KEY_PART.match(part) for part in parts):
            raise ValueError(f"payload path {path!r} is not a plain relative path")
        key = ".".join(parts)
        if key in items or len(key) > 253:
            raise ValueError(f"payload path {path!r} does not map to a unique key")
        items[key] = path
    return [{"key": key, "path": path} for key, path in items.items()]


def payload_object(
    name: str, namespace: str | None, files: Mapping[str, bytes], secret: bool
) -> Manifest:
    """The ConfigMap (``binaryData``) or Secret (``data``) holding ``files`` for job ``name``.

    ``files`` maps relative paths to contents. Raises :class:`PayloadTooLarge`
    when keys plus contents exceed :data:`MAX_PAYLOAD_BYTES`. The object is
    immutable and has no owner yet: see :func:`with_owner`.
    """
    kind = "Secret" if secret else "ConfigMap"
    items = payload_items(files)
    size = sum(len(item["key"]) + len(files[item["path"]]) for item in items)
    if size > MAX_PAYLOAD_BYTES:
        sizes = {path: len(data) for path, data in files.items()}
        raise PayloadTooLarge(size, MAX_PAYLOAD_BYTES, sizes, kind)
    data = {item["key"]: base64.b64encode(files[item["path"]]).decode() for item in items}
    obj: Manifest = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": _meta(payload_name(name), name, namespace),
    }
    if secret:
        obj.update(type="Opaque", immutable=True, data=data)
    else:
        obj.update(immutable=True, binaryData=data)
    return obj


def owner_reference(owner: Mapping[str, Any]) -> dict[str, str]:
    """An ownerReference to ``owner``, an object as the API server returned it (with a uid)."""
    meta = owner.get("metadata") or {}
    if not meta.get("uid") or not meta.get("name"):
        raise ValueError("the owner has no metadata.uid; pass the object the API server returned")
    return {
        "apiVersion": str(owner["apiVersion"]),
        "kind": str(owner["kind"]),
        "name": str(meta["name"]),
        "uid": str(meta["uid"]),
    }


def with_owner(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> Manifest:
    """A copy of ``obj`` owned by ``owner``, so that deleting the owner deletes it.

    Raises ValueError when both name different namespaces (the garbage
    collector would delete ``obj`` at once).
    """
    ref = owner_reference(owner)
    here = (obj.get("metadata") or {}).get("namespace")
    there = (owner.get("metadata") or {}).get("namespace")
    if here and there and here != there:
        raise ValueError(f"cannot own an object in namespace {here} from namespace {there}")
    out = _plain(obj)
    meta = out.setdefault("metadata", {})
    refs = [r for r in meta.get("ownerReferences", []) if r.get("uid") != ref["uid"]]
    meta["ownerReferences"] = [*refs, ref]
    return out


def _plain(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy holding JSON types only (and no shared sub-objects)."""
    copy: dict[str, Any] = json.loads(json.dumps(obj))
    return copy


def _meta(name: str, job: str, namespace: str | None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = labels(job)
    meta.update(extra)
    return meta


# --- Checks shared by both job kinds -------------------------------------------------------


def check(spec: JobSpec, opts: K8sOptions) -> None:
    """Raise :class:`ConflictingOptionsError` when ``opts`` cannot run ``spec``."""
    env = spec.env_dict()
    if opts.elastic is not None:
        low, high = opts.elastic.min_nodes, opts.elastic.max_nodes
        if spec.framework != "pytorch":
            raise ConflictingOptionsError("--elastic needs --framework pytorch; remove --elastic")
        if not low <= spec.nodes <= high:
            raise ConflictingOptionsError(
                f"--nodes {spec.nodes} is outside --elastic {low}:{high}; the job starts "
                f"--nodes pods, so choose --nodes between {low} and {high}"
            )
    if spec.framework == "tensorflow" and spec.nproc != 1:
        raise ConflictingOptionsError(
            f"--nproc {spec.nproc} with TensorFlow: a TFJob runs one process per node that "
            "uses all of the node's GPUs; use --nproc 1"
        )
    if spec.framework == "pytorch" and 0 < opts.gpus < spec.nproc and spec.dist_backend != "gloo":
        raise ConflictingOptionsError(
            f"--nproc {spec.nproc} is more than --gpus {opts.gpus}: NCCL needs one GPU per "
            f"process; use --nproc {opts.gpus}, --gpus {spec.nproc} or --dist-backend gloo"
        )
    for key in env:
        if key.startswith("PET_"):
            raise ConflictingOptionsError(
                f"--env {key}=... would override the torchrun setting the training operator "
                "passes to every pod; remove it and use --nodes, --nproc or --elastic"
            )
    if opts.pip and "PYTHONUSERBASE" in env:
        raise ConflictingOptionsError(
            f"--env PYTHONUSERBASE=... hides the packages --pip installs in {PIP_DIR}; remove it"
        )
    _check_checkpoint_paths(spec, opts)
    if opts.prometheus is not None and spec.framework != "pytorch":
        raise ConflictingOptionsError(
            "--prometheus serves the metrics every rank reports through rank 0, which needs "
            "--framework pytorch; remove --prometheus"
        )


def _check_checkpoint_paths(spec: JobSpec, opts: K8sOptions) -> None:
    """A path given to --checkpoint-dir or --resume must be on a --volume every pod mounts."""
    for flag, value in (("--checkpoint-dir", spec.checkpoint_dir), ("--resume", spec.resume)):
        if not value or value == "latest" or value.isdigit():
            continue
        if "://" in value and not value.startswith("file://"):
            continue  # a URL (s3://, gs://): the pods need its fsspec package
        path = value.removeprefix("file://")
        top = "/" + path.strip("/").split("/", 1)[0]
        if not path.startswith("/"):
            raise ConflictingOptionsError(
                f"{flag} {value}: on Kubernetes a checkpoint path is a path inside the pods and "
                f"must be absolute and on a --volume, e.g. --volume CLAIM:/checkpoints "
                f"{flag} /checkpoints/run1"
            )
        under = [v for v in opts.volumes if path == v.path or path.startswith(v.path + "/")]
        mount = under[0] if under else None
        if mount is None:
            raise ConflictingOptionsError(
                f"{flag} {value} is a path inside the pods, but no --volume is mounted there: "
                "each pod would write to its own disk and lose it when the pod restarts. Add "
                f"--volume CLAIM:{top} (a PersistentVolumeClaim every pod mounts; ReadWriteMany "
                "for several nodes) or use an s3:// or gs:// URL"
            )
        if flag == "--checkpoint-dir" and mount.read_only:
            raise ConflictingOptionsError(
                f"--checkpoint-dir {value} is on the read-only --volume {mount.claim}:"
                f"{mount.path}; mount it writable (drop :ro)"
            )


# --- Pod template --------------------------------------------------------------------------


def _user_env(spec: JobSpec) -> dict[str, str]:
    """``--env`` as the kubelet must see it: it expands ``$(VAR)`` in values, ``$$`` is ``$``."""
    return {key: value.replace("$", "$$") for key, value in spec.env}


def _env(spec: JobSpec, opts: K8sOptions) -> list[dict[str, Any]]:
    # Several ranks share a pod's log: each line is prefixed "[rank R] ".
    env = {
        "PYTHONPATH": PAYLOAD_DIR,
        jobkey.ENV_KEY_FILE: f"{PAYLOAD_DIR}/{jobkey.KEY_FILE}",
        "DISTRAIN_RANK_PREFIX": "1",
        "DISTRAIN_POD_ANNOTATIONS": f"{PODINFO_DIR}/annotations",
        "DISTRAIN_RELAY": "1",  # every rank's metrics reach node 0's log, the one followed
    }
    if spec.timeout:
        env["DISTRAIN_PG_TIMEOUT"] = str(max(30, math.ceil(spec.timeout)))
    if opts.pip:
        env["PYTHONUSERBASE"] = PIP_DIR
    env.update(opts.nccl_env())
    if spec.checkpoint_dir:  # the job's name lets restarted pods resume its own checkpoints
        env["DISTRAIN_CHECKPOINT_DIR"] = spec.checkpoint_dir.replace("$", "$$")
        env["DISTRAIN_JOB_ID"] = spec.name
    if spec.resume:
        env["DISTRAIN_RESUME"] = spec.resume.replace("$", "$$")
    if spec.grace_period:
        env["DISTRAIN_GRACE_PERIOD"] = f"{spec.grace_period:g}"
    if spec.hang_after is not None:
        env["DISTRAIN_HANG_AFTER"] = f"{spec.hang_after:g}"
    if opts.elastic is not None and spec.max_restarts:  # a fresh worker store per round
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    for key, value in _user_env(spec).items():
        env[key] = f"{PAYLOAD_DIR}:{value}" if key == "PYTHONPATH" else value
    return [{"name": key, "value": value} for key, value in env.items()] + metrics_env(opts)


def _resources(opts: K8sOptions, *, gpus: bool) -> dict[str, dict[str, str]]:
    amounts = {"cpu": opts.cpu, "memory": opts.memory}
    requests = {key: value for key, value in amounts.items() if value}
    limits = dict(requests)
    if gpus and opts.gpus:
        limits["nvidia.com/gpu"] = str(opts.gpus)
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def _volumes(
    name: str, opts: K8sOptions, files: Iterable[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    files_ref = {"items": payload_items(files), "defaultMode": 0o444}
    if opts.payload_secret:
        source = {"secret": {"secretName": payload_name(name), **files_ref}}
    else:
        source = {"configMap": {"name": payload_name(name), **files_ref}}
    volumes: list[dict[str, Any]] = [{"name": "payload", **source}]
    mounts: list[dict[str, Any]] = [{"name": "payload", "mountPath": PAYLOAD_DIR, "readOnly": True}]
    annotations = {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
    volumes.append({"name": "podinfo", "downwardAPI": {"items": [annotations]}})
    mounts.append({"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True})
    if opts.shm:
        size = {"sizeLimit": opts.shm_size} if opts.shm_size else {}
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", **size}})
        mounts.append({"name": "shm", "mountPath": SHM_PATH})
    if opts.pip:
        volumes.append({"name": "pip", "emptyDir": {}})
        mounts.append({"name": "pip", "mountPath": PIP_DIR})
    for index, volume in enumerate(opts.volumes):
        read_only = {"readOnly": True} if volume.read_only else {}
        claim = {"claimName": volume.claim, **read_only}
        volumes.append({"name": f"data-{index}", "persistentVolumeClaim": claim})
        mounts.append({"name": f"data-{index}", "mountPath": volume.path, **read_only})
    return volumes, mounts


def pip_command(requirements: Sequence[str]) -> list[str]:
    """The init container's exec-form pip command; requirements are argv items after ``--``."""
    return [
        "python", "-m", "pip", "install", "--user", "--no-cache-dir",
        "--disable-pip-version-check", "--no-input", "--", *requirements,
    ]  # fmt: skip


def _pod_template(
    framework: str,
    spec: JobSpec,
    opts: K8sOptions,
    files: Iterable[str],
    versions: Mapping[str, str],
    images: ImagePolicy,
    script: bool = False,
) -> dict[str, Any]:
    """Every replica's pod template, after checking that ``opts`` can run ``spec``; a
    ``script`` payload's pods get its folder (:mod:`.k8s_script`)."""
    check(spec, opts)
    paths = list(files)
    if PAYLOAD_FILE not in paths:
        raise ValueError(f"the payload files must include {PAYLOAD_FILE}")
    image = opts.image or default_image(framework, versions, gpus=opts.gpus, policy=images)
    name, port_name, port = _CONTAINERS[framework]
    metrics_port = []
    if opts.prometheus is not None:
        metrics_port = [{"name": PORT_NAME, "containerPort": opts.prometheus, "protocol": "TCP"}]
    volumes, mounts = _volumes(spec.name, opts, paths)
    main: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": worker_command(framework),
        "env": _env(spec, opts),
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}, *metrics_port],
        "volumeMounts": mounts,
    }
    resources = _resources(opts, gpus=True)
    if resources:
        main["resources"] = resources
    if script:
        add_script_dir(volumes, mounts, main["env"], main)
    pod: dict[str, Any] = {"containers": [main], "volumes": volumes}
    if spec.grace_period:  # the kubelet's SIGTERM-to-SIGKILL time covers the last save
        pod["terminationGracePeriodSeconds"] = math.ceil(spec.grace_period) + 5
    inits: list[dict[str, Any]] = []
    if opts.pip:
        init_env = {**_user_env(spec), "PYTHONUSERBASE": PIP_DIR}
        init: dict[str, Any] = {
            "name": "pip-install",
            "image": image,
            "command": pip_command(opts.pip),
            "env": [{"name": key, "value": value} for key, value in init_env.items()],
            "volumeMounts": [{"name": "pip", "mountPath": PIP_DIR}],
        }
        init_resources = _resources(opts, gpus=False)
        if init_resources:
            init["resources"] = init_resources
        inits.append(init)
    if opts.data:
        data_vols, data_mounts = k8s_data.data_volumes(opts)
        volumes.extend(data_vols)
        mounts.extend(data_mounts)
        stage_env = {"PYTHONPATH": PAYLOAD_DIR,
                     jobkey.ENV_KEY_FILE: f"{PAYLOAD_DIR}/{jobkey.KEY_FILE}"}  # fmt: skip
        for key, value in _user_env(spec).items():
            stage_env[key] = f"{PAYLOAD_DIR}:{value}" if key == "PYTHONPATH" else value
        env_list = [{"name": key, "value": value} for key, value in stage_env.items()]
        inits.append(k8s_data.init_container(opts, image, env_list, mounts[0],
                                             _resources(opts, gpus=False)))  # fmt: skip
    if inits:
        pod["initContainers"] = inits
    if opts.node_selector:
        pod["nodeSelector"] = dict(opts.node_selector)
    if opts.tolerations:
        pod["tolerations"] = [t.to_dict() for t in opts.tolerations]
    if opts.scheduler != "default":
        pod["schedulerName"] = opts.scheduler
    if opts.runai_project:
        pod["schedulerName"] = RUNAI_SCHEDULER
    if opts.host_network:  # the node's network: its RDMA NICs, no overlay; DNS still the cluster's
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        main["ports"] = [{"name": port_name, "containerPort": host_port(spec.name, opts),
                          "protocol": "TCP"}, *metrics_port]  # fmt: skip
    if opts.priority_class:
        pod["priorityClassName"] = opts.priority_class
    if opts.service_account:
        pod["serviceAccountName"] = opts.service_account
    if opts.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": opts.image_pull_secret}]
    return {"metadata": pod_metadata(labels(spec.name), opts), "spec": pod}


def _replica(replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": "OnFailure", "template": template}


# --- Job objects ---------------------------------------------------------------------------


def _job_meta(
    spec: JobSpec, opts: K8sOptions, versions: Mapping[str, str], notebook: str | None
) -> dict[str, Any]:
    annotations = {}
    for key, value in sorted(versions.items()):
        if not is_dns_label(key):
            raise ValueError(f"version key {key!r} is not a lowercase name")
        annotations[f"disttrain.jupyter.org/{key}-version"] = value
    if notebook:
        annotations[ANNOTATION_NOTEBOOK] = notebook
    own_labels, own_annotations = job_labels(spec.labels)
    annotations.update(own_annotations)
    meta = _meta(spec.name, spec.name, opts.namespace, annotations=annotations)
    meta["labels"].update(own_labels)
    if opts.runai_project:
        meta["labels"][RUNAI_PROJECT_LABEL] = opts.runai_project
    if opts.queue and opts.scheduler != "volcano":
        meta["labels"][KUEUE_QUEUE_LABEL] = opts.queue
    return meta


def _run_policy(spec: JobSpec, opts: K8sOptions, min_available: int) -> dict[str, Any]:
    policy: dict[str, Any] = {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts}
    if spec.timeout is not None:
        policy["activeDeadlineSeconds"] = math.ceil(spec.timeout)
    if opts.scheduler == "volcano":
        gang: dict[str, Any] = {"minAvailable": min_available}
        if opts.queue:
            gang["queue"] = opts.queue
        if opts.priority_class:
            gang["priorityClass"] = opts.priority_class
        policy["schedulingPolicy"] = gang
    return policy


def worker_command(framework: str) -> list[str]:
    """The exec-form command of every training container for ``framework``."""
    payload = posixpath.join(PAYLOAD_DIR, PAYLOAD_FILE)
    if framework == "tensorflow":
        return ["python", "-m", WORKER_MODULE, payload]
    return ["python", "-m", "torch.distributed.run", "--module", WORKER_MODULE, payload]


def pytorchjob(
    spec: JobSpec,
    opts: K8sOptions,
    files: Iterable[str],
    versions: Mapping[str, str],
    *,
    notebook: str | None = None,
    images: ImagePolicy = STOCK_IMAGES,
    script: bool = False,
) -> Manifest:
    """The ``PyTorchJob`` for ``spec``; ``files`` are the payload's relative paths.

    Master 1 + Worker ``nodes - 1`` (Worker omitted for one node), or, with
    ``opts.elastic``, Worker ``nodes`` and an ``elasticPolicy`` (c10d).
    ``versions`` (``python``, ``torch``, ...) pick the default image and are
    recorded as annotations. Raises :class:`~.k8s_options.OptionError`.
    """
    template = _pod_template("pytorch", spec, opts, files, versions, images, script)
    body: dict[str, Any] = {}
    if opts.elastic is not None:
        # Without a Master the operator sets PET_NPROC_PER_NODE only from the
        # policy's nProcPerNode (and rejects it beside spec.nprocPerNode).
        body["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "rdzvId": spec.name,
            "minReplicas": opts.elastic.min_nodes,
            "maxReplicas": opts.elastic.max_nodes,
            "maxRestarts": spec.max_restarts,
            "nProcPerNode": spec.nproc,
        }
        body["pytorchReplicaSpecs"] = {"Worker": _replica(spec.nodes, template)}
        min_available = opts.elastic.min_nodes
    else:
        body["nprocPerNode"] = str(spec.nproc)
        replicas = {"Master": _replica(1, template)}
        if spec.nodes > 1:
            replicas["Worker"] = _replica(spec.nodes - 1, _plain(template))
        body["pytorchReplicaSpecs"] = replicas
        min_available = spec.nodes
    body["runPolicy"] = _run_policy(spec, opts, min_available)
    return {
        "apiVersion": PYTORCHJOB.api_version,
        "kind": PYTORCHJOB.kind,
        "metadata": _job_meta(spec, opts, versions, notebook),
        "spec": body,
    }


def tfjob(
    spec: JobSpec,
    opts: K8sOptions,
    files: Iterable[str],
    versions: Mapping[str, str],
    *,
    notebook: str | None = None,
    images: ImagePolicy = STOCK_IMAGES,
    script: bool = False,
) -> Manifest:
    """The ``TFJob`` for ``spec``: Chief 1 + Worker ``nodes - 1``; as :func:`pytorchjob`."""
    template = _pod_template("tensorflow", spec, opts, files, versions, images, script)
    replicas = {"Chief": _replica(1, template)}
    if spec.nodes > 1:
        replicas["Worker"] = _replica(spec.nodes - 1, _plain(template))
    return {
        "apiVersion": TFJOB.api_version,
        "kind": TFJOB.kind,
        "metadata": _job_meta(spec, opts, versions, notebook),
        "spec": {"tfReplicaSpecs": replicas, "runPolicy": _run_policy(spec, opts, spec.nodes)},
    }


def manifests(
    spec: JobSpec,
    opts: K8sOptions,
    payload_files: Mapping[str, bytes],
    versions: Mapping[str, str],
    *,
    notebook: str | None = None,
    images: ImagePolicy = STOCK_IMAGES,
    script: bool = False,
) -> list[Manifest]:
    """Every object of job ``spec`` in creation order: payload object, the job, then its
    ``--prometheus`` Service and ServiceMonitor.

    ``payload_files`` maps relative paths (``payload.pkl``,
    ``jupyter_disttrain/runtime/worker.py``, ...) to contents; they appear
    under ``/opt/disttrain/payload`` in each pod, which is on ``PYTHONPATH``.
    ``notebook`` (a path) is recorded as an annotation. Raises
    :class:`~.k8s_options.OptionError` or :class:`PayloadTooLarge` before
    anything could be created.
    """
    build = tfjob if spec.framework == "tensorflow" else pytorchjob
    job = build(spec, opts, payload_files, versions, notebook=notebook, images=images,
                script=script)  # fmt: skip
    payload_obj = payload_object(spec.name, opts.namespace, payload_files, opts.payload_secret)
    kind = TFJOB if spec.framework == "tensorflow" else PYTORCHJOB
    extras = metrics_objects(spec.name, opts.namespace, kind, opts, labels(spec.name))
    return [payload_obj, job, *extras]
