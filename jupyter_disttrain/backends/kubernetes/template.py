"""What every kind's job object shares: names, labels, the payload object, the pod template.

Pure: every function takes plain values and returns new plain dicts (JSON
types only, no ``kubernetes`` client models); nothing here does I/O. The
kinds (:mod:`.kinds`) build their job objects from these parts;
:func:`.manifests.manifests` gives a job's objects in creation order.

Every pod sees the same layout::

    /opt/disttrain/payload   payload files (runtime package + payload.pkl), read-only
    /opt/disttrain/pip       user base of the packages --pip installs (init container)
    /dev/shm                 memory-backed shared memory (unless --shm none)

and runs an exec-form command, never a shell: the kind's launcher, then
``/opt/disttrain/payload/payload.pkl`` (for a PyTorchJob or TrainJob, torchrun
with warm workers, :mod:`jupyter_disttrain.runtime.podlaunch`, which takes
nodes, rank, rendezvous and processes per node from the ``PET_*`` environment
the training operator sets; for a TFJob ``python -m
jupyter_disttrain.runtime.worker``, with the operator's ``TF_CONFIG``).
User text (cell, globals) only travels inside the
payload file; ``--pip`` requirements are separate argv items after ``--``.
"""

from __future__ import annotations

import base64
import json
import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ...frameworks import framework
from ...runtime import jobkey
from ...runtime.env import ENV_JOB_ID
from ...runtime.warm import ENV_WARM
from ...spec import JobSpec, SpecError
from ...units import format_bytes
from ..environment import spec_env
from . import staging
from .images import default_image
from .labels import job_labels
from .metrics import PORT_NAME, metrics_env
from .pods import RUNAI_PROJECT_LABEL, RUNAI_SCHEDULER, host_port, pod_metadata
from .rendezvous import rendezvous_env
from .script import add_script_dir
from .syntax import RUNTIME_ROOT, SHM_PATH, ConflictingOptionsError, is_dns_label

if TYPE_CHECKING:
    from .kinds.base import JobInputs, KubeflowKind
    from .options import K8sOptions

Manifest = dict[str, Any]

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
#: Launchers a kind may declare, each the command before the payload file: torchrun (nodes,
#: rank, rendezvous and processes per node from the ``PET_*`` environment its controller
#: sets) whose workers fork from one process that imported torch once per pod
#: (:mod:`jupyter_disttrain.runtime.podlaunch`), or the worker module run by plain Python.
TORCHRUN: Final = ("python", "-u", "-m", "jupyter_disttrain.runtime.podlaunch")
PYTHON_MODULE: Final = ("python", "-m", WORKER_MODULE)
#: What the API server accepts in one ConfigMap or Secret (keys plus data).
MAX_PAYLOAD_BYTES: Final = 1024 * 1024


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
    out = plain(obj)
    meta = out.setdefault("metadata", {})
    refs = [r for r in meta.get("ownerReferences", []) if r.get("uid") != ref["uid"]]
    meta["ownerReferences"] = [*refs, ref]
    return out


def plain(obj: Mapping[str, Any]) -> dict[str, Any]:
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


def check_job(spec: JobSpec, opts: K8sOptions, kind: KubeflowKind) -> None:
    """Raise :class:`ConflictingOptionsError` when ``opts`` cannot run ``spec`` as ``kind``
    (its :class:`~.kinds.base.Limits` included)."""
    env = spec.env_dict()
    limits = kind.limits
    if opts.elastic is not None:
        low, high = opts.elastic.min_nodes, opts.elastic.max_nodes
        if limits.elastic:
            raise ConflictingOptionsError(limits.elastic)
        if not low <= spec.nodes <= high:
            raise ConflictingOptionsError(
                f"--nodes {spec.nodes} is outside --elastic {low}:{high}; the job starts "
                f"--nodes pods, so choose --nodes between {low} and {high}"
            )
    if limits.nproc and spec.nproc != 1:
        raise ConflictingOptionsError(limits.nproc.format(nproc=spec.nproc))
    if limits.gpu_per_process and 0 < opts.gpus < spec.nproc and spec.dist_backend != "gloo":
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
    if opts.prometheus is not None and limits.prometheus:
        raise ConflictingOptionsError(limits.prometheus)


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


def user_env(spec: JobSpec) -> dict[str, str]:
    """``--env`` as the kubelet must see it: it expands ``$(VAR)`` in values, ``$$`` is ``$``."""
    return {key: _kubelet_escape(value) for key, value in spec.env}


def _kubelet_escape(value: str) -> str:
    """``value`` as the kubelet must see it (it expands ``$(VAR)``; ``$$`` is ``$``)."""
    return value.replace("$", "$$")


def worker_env(spec: JobSpec, opts: K8sOptions, warm: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The training containers' environment; ``warm``: the library modules the pod's
    launcher imports ahead (a user's ``--env`` of :data:`ENV_WARM` wins)."""
    # Several ranks share a pod's log: each line is prefixed "[rank R] ".
    env = {
        "PYTHONPATH": PAYLOAD_DIR,
        jobkey.ENV_KEY_FILE: f"{PAYLOAD_DIR}/{jobkey.KEY_FILE}",
        "DISTRAIN_RANK_PREFIX": "1",
        "DISTRAIN_POD_ANNOTATIONS": f"{PODINFO_DIR}/annotations",
        "DISTRAIN_RELAY": "1",  # every rank's metrics reach node 0's log, the one followed
    }
    if opts.pip:
        env["PYTHONUSERBASE"] = PIP_DIR
    env.update(opts.nccl_env())
    if spec.checkpoint_dir:  # the job's name lets restarted pods resume its own checkpoints
        env["DISTRAIN_CHECKPOINT_DIR"] = _kubelet_escape(spec.checkpoint_dir)
        env[ENV_JOB_ID] = spec.name
    env.update(spec_env(spec, escape=_kubelet_escape))
    if warm:
        env[ENV_WARM] = ",".join(warm)
    if opts.elastic is not None and spec.max_restarts:  # a fresh worker store per round
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    meets_in_c10d = framework(spec.framework).launch.c10d_rendezvous
    if meets_in_c10d and opts.elastic is None:  # elastic: in its rdzvConf
        env.update(rendezvous_env(spec.nodes * spec.nproc))  # torchrun's, scaled to the job
    for key, value in user_env(spec).items():
        env[key] = f"{PAYLOAD_DIR}:{value}" if key == "PYTHONPATH" else value
    return [{"name": key, "value": value} for key, value in env.items()] + metrics_env(opts)


def resources(opts: K8sOptions, *, gpus: bool) -> dict[str, dict[str, str]]:
    amounts = {"cpu": opts.cpu, "memory": opts.memory}
    requests = {key: value for key, value in amounts.items() if value}
    limits = dict(requests)
    if gpus and opts.gpus:
        limits["nvidia.com/gpu"] = str(opts.gpus)
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def pod_volumes(
    name: str, opts: K8sOptions, files: Iterable[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # the Secret holds the job key and the captured values: readable by the pod's user only
    mode = 0o400 if opts.payload_secret else 0o444
    files_ref = {"items": payload_items(files), "defaultMode": mode}
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
        "python",
        "-m",
        "pip",
        "install",
        "--user",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-input",
        "--",
        *requirements,
    ]


def payload_paths(job: JobInputs) -> list[str]:
    """``job.files`` as a list; ValueError when the payload itself is not among them."""
    paths = list(job.files)
    if PAYLOAD_FILE not in paths:
        raise ValueError(f"the payload files must include {PAYLOAD_FILE}")
    return paths


def pod_template(kind: KubeflowKind, job: JobInputs) -> dict[str, Any]:
    """Every replica's pod template of ``kind``, after checking that ``job.opts`` can run
    ``job.spec`` (:func:`check_job`); a script payload's pods get its folder (:mod:`.script`)."""
    spec, opts, script = job.spec, job.opts, job.script
    check_job(spec, opts, kind)
    paths = payload_paths(job)
    image = opts.image or default_image(
        spec.framework, job.versions, gpus=opts.gpus, policy=job.images
    )
    name, port_name, port = kind.container, kind.port_name, kind.port
    metrics_port = []
    if opts.prometheus is not None:
        metrics_port = [{"name": PORT_NAME, "containerPort": opts.prometheus, "protocol": "TCP"}]
    volumes, mounts = pod_volumes(spec.name, opts, paths)
    main: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": launch_command(kind),
        "env": worker_env(spec, opts, job.warm),
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}, *metrics_port],
        "volumeMounts": mounts,
    }
    amounts = resources(opts, gpus=True)
    if amounts:
        main["resources"] = amounts
    if script:
        add_script_dir(volumes, mounts, main["env"], main)
    pod: dict[str, Any] = {"containers": [main], "volumes": volumes}
    if spec.grace_period:  # the kubelet's SIGTERM-to-SIGKILL time covers the last save
        pod["terminationGracePeriodSeconds"] = math.ceil(spec.grace_period) + 5
    inits: list[dict[str, Any]] = []
    if opts.pip:
        init_env = {**user_env(spec), "PYTHONUSERBASE": PIP_DIR}
        init: dict[str, Any] = {
            "name": "pip-install",
            "image": image,
            "command": pip_command(opts.pip),
            "env": [{"name": key, "value": value} for key, value in init_env.items()],
            "volumeMounts": [{"name": "pip", "mountPath": PIP_DIR}],
        }
        init_resources = resources(opts, gpus=False)
        if init_resources:
            init["resources"] = init_resources
        inits.append(init)
    if opts.data:
        data_vols, data_mounts = staging.data_volumes(opts)
        volumes.extend(data_vols)
        mounts.extend(data_mounts)
        stage_env = {
            "PYTHONPATH": PAYLOAD_DIR,
            jobkey.ENV_KEY_FILE: f"{PAYLOAD_DIR}/{jobkey.KEY_FILE}",
        }
        for key, value in user_env(spec).items():
            stage_env[key] = f"{PAYLOAD_DIR}:{value}" if key == "PYTHONPATH" else value
        env_list = [{"name": key, "value": value} for key, value in stage_env.items()]
        inits.append(
            staging.init_container(opts, image, env_list, mounts[0], resources(opts, gpus=False))
        )
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
        main["ports"] = [
            {"name": port_name, "containerPort": host_port(spec.name, opts), "protocol": "TCP"},
            *metrics_port,
        ]
    if opts.priority_class:
        pod["priorityClassName"] = opts.priority_class
    if opts.service_account:
        pod["serviceAccountName"] = opts.service_account
    if opts.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": opts.image_pull_secret}]
    return {"metadata": pod_metadata(labels(spec.name), opts), "spec": pod}


# --- Job objects ---------------------------------------------------------------------------


def job_metadata(
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


def launch_command(kind: KubeflowKind, framework: str = "") -> list[str]:
    """The exec-form command of every training container of ``kind``: its launcher (for
    ``framework``, see :meth:`~.kinds.base.KubeflowKind.launcher_of`), then the payload
    file."""
    launcher = kind.launcher_of(framework) if framework else kind.launcher
    return [*launcher, posixpath.join(PAYLOAD_DIR, PAYLOAD_FILE)]
