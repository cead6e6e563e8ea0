"""Kubernetes manifests: shape, options, payload object, YAML, and the real CRD schemas."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes.images import ImageError, ImagePolicy, default_image
from jupyter_disttrain.backends.kubernetes.manifests import manifests, pytorchjob, tfjob
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.kubernetes.options import (
    ConflictingOptionsError,
    K8sOptions,
    OptionValueError,
)
from jupyter_disttrain.backends.kubernetes.template import (
    MAX_PAYLOAD_BYTES,
    PAYLOAD_DIR,
    PODINFO_DIR,
    PayloadTooLarge,
    payload_items,
    payload_object,
    with_owner,
)
from jupyter_disttrain.backends.kubernetes.yaml import render_yaml
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.crd_schema import ManifestError, manifest_errors, validate_manifest

Obj = dict[str, Any]

PACKAGE = Path(__file__).resolve().parents[3] / "jupyter_disttrain"
CELL = 'import os\nprint(os.environ["HOME"], "$HOME", `whoami`, "$(id -u)")\n'
PAYLOAD = pickle.dumps({"source": CELL, "python": "3.11.7"})
FILES: dict[str, bytes] = {
    "payload.pkl": PAYLOAD,
    "jupyter_disttrain/__init__.py": (PACKAGE / "__init__.py").read_bytes(),
    **{
        path.relative_to(PACKAGE.parent).as_posix(): path.read_bytes()
        for path in sorted((PACKAGE / "runtime").rglob("*.py"))
    },
}
VERSIONS = {"python": "3.11.7", "torch": "2.13.0+cpu", "cloudpickle": "3.1.1"}
TORCHRUN = [
    "python",
    "-u",
    "-m",
    "jupyter_disttrain.runtime.podlaunch",
    "/opt/disttrain/payload/payload.pkl",
]
EVERY_OPTION = (
    ("image", "registry.example.com/ml/torch:2.13.0-py3.11"),
    ("gpus", "4"),
    ("cpu", "16"),
    ("memory", "120Gi"),
    ("shm", "32Gi"),
    ("nccl", "ib"),
    ("nccl", "debug"),
    ("volume", "datasets:/data:ro"),
    ("volume", "ckpt:/checkpoints"),
    ("node-selector", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"),
    ("node_selector", "topology.kubernetes.io/zone=us-east-1a"),
    ("toleration", "nvidia.com/gpu=present:NoSchedule"),
    ("toleration", "dedicated:noexecute"),
    ("toleration", "spot=true"),
    ("priority_class", "high-priority"),
    ("queue", "team-a"),
    ("service_account", "trainer"),
    ("image_pull_secret", "regcred"),
    ("pip", "einops==0.8.0"),
    ("pip", "timm[extras]>=1.0,<2"),
    ("namespace", "ml-team"),
    ("context", "gke_proj_us-east1_gpu"),
    ("payload_secret", "true"),
)


def job_spec(**changes: Any) -> JobSpec:
    fields: dict[str, Any] = {"name": "mnist-ddp", "nodes": 3, "nproc": 2, "backend": "kubernetes"}
    fields.update(changes)
    return JobSpec(**fields)


def build(options: tuple[tuple[str, str], ...] = (), **changes: Any) -> tuple[Obj, Obj]:
    """(payload object, job) for a spec, with the job validated against its CRD."""
    spec = job_spec(options=options, **changes)
    payload, job = manifests(spec, parse_options(spec.options), FILES, VERSIONS)
    validate_manifest(job)
    return payload, job


def replica_specs(job: Obj) -> dict[str, Obj]:
    key = "pytorchReplicaSpecs" if job["kind"] == "PyTorchJob" else "tfReplicaSpecs"
    specs: dict[str, Obj] = job["spec"][key]
    return specs


def pods(job: Obj) -> list[Obj]:
    return [replica["template"]["spec"] for replica in replica_specs(job).values()]


def env_of(container: Obj) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def argv_items(job: Obj) -> list[str]:
    """Every command/args item of every container and init container."""
    items: list[str] = []
    for pod in pods(job):
        for container in pod["containers"] + pod.get("initContainers", []):
            items += container.get("command", []) + container.get("args", [])
    return items


# --- PyTorchJob -----------------------------------------------------------------------------


def test_master_and_workers() -> None:
    payload, job = build(env=(("LR", "0.1"),), timeout=3600.5, max_restarts=2)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    specs = replica_specs(job)
    assert list(specs) == ["Master", "Worker"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    assert specs["Master"]["template"] is not specs["Worker"]["template"]
    assert specs["Master"]["template"] == specs["Worker"]["template"]
    assert job["spec"]["nprocPerNode"] == "2" and "elasticPolicy" not in job["spec"]
    assert job["spec"]["runPolicy"] == {
        "cleanPodPolicy": "None",
        "backoffLimit": 2,
        "activeDeadlineSeconds": 3601,
    }
    for replica in specs.values():
        assert replica["restartPolicy"] == "OnFailure"
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime"
        assert container["command"] == TORCHRUN and "args" not in container
        assert container["ports"] == [
            {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}
        ]
        assert env_of(container) == {
            "PYTHONPATH": PAYLOAD_DIR,
            "DISTRAIN_KEY_FILE": f"{PAYLOAD_DIR}/key",  # the key itself is in the Secret
            "DISTRAIN_RANK_PREFIX": "1",
            "DISTRAIN_POD_ANNOTATIONS": f"{PODINFO_DIR}/annotations",
            "DISTRAIN_RELAY": "1",
            "DISTRAIN_PG_TIMEOUT": "3601",
            "LR": "0.1",
        }
        assert "resources" not in container and "initContainers" not in pod
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["payload"] == {"name": "payload", "mountPath": PAYLOAD_DIR, "readOnly": True}
        assert mounts["shm"]["mountPath"] == "/dev/shm"
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["shm"] == {"name": "shm", "emptyDir": {"medium": "Memory"}}
        # the notebook asks rank 0 for the stacks by annotating its pod
        assert volumes["podinfo"]["downwardAPI"]["items"] == [
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
        ]
        assert mounts["podinfo"] == {"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True}
        config_map = volumes["payload"]["configMap"]
        assert config_map["name"] == payload["metadata"]["name"] == "mnist-ddp-payload"
        assert {i["key"] for i in config_map["items"]} == set(payload["binaryData"])
        assert {i["path"] for i in config_map["items"]} == set(FILES)
        assert replica["template"]["metadata"]["labels"] == job["metadata"]["labels"]


def test_labels_and_annotations() -> None:
    spec = job_spec()
    payload, job = manifests(spec, K8sOptions(), FILES, VERSIONS, notebook="work/mnist.ipynb")
    expected = {
        "app.kubernetes.io/managed-by": "jupyter-disttrain",
        "disttrain.jupyter.org/job": "mnist-ddp",
    }
    assert payload["metadata"]["labels"] == job["metadata"]["labels"] == expected
    assert job["metadata"]["annotations"] == {
        "disttrain.jupyter.org/cloudpickle-version": "3.1.1",
        "disttrain.jupyter.org/python-version": "3.11.7",
        "disttrain.jupyter.org/torch-version": "2.13.0+cpu",
        "disttrain.jupyter.org/notebook": "work/mnist.ipynb",
    }
    assert "namespace" not in job["metadata"] and "namespace" not in payload["metadata"]
    validate_manifest(job)


def test_single_node_has_master_only() -> None:
    _, job = build(nodes=1, nproc=4)
    assert list(replica_specs(job)) == ["Master"]
    assert job["spec"]["nprocPerNode"] == "4"


def test_elastic_is_worker_only_with_policy() -> None:
    _, job = build((("elastic", "2:4"),), nodes=3, max_restarts=5)
    specs = replica_specs(job)
    assert list(specs) == ["Worker"] and specs["Worker"]["replicas"] == 3
    assert job["spec"]["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "rdzvId": "mnist-ddp",
        "minReplicas": 2,
        "maxReplicas": 4,
        "maxRestarts": 5,
        "nProcPerNode": 2,
    }
    assert "nprocPerNode" not in job["spec"]
    assert pods(job)[0]["containers"][0]["command"] == TORCHRUN


def test_every_option() -> None:
    payload, job = build(EVERY_OPTION, env=(("PYTHONPATH", "/data/lib"), ("NCCL_DEBUG", "WARN")))
    assert payload["kind"] == "Secret" and payload["metadata"]["namespace"] == "ml-team"
    assert job["metadata"]["namespace"] == "ml-team"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "schedulingPolicy" not in job["spec"]["runPolicy"]
    for pod in pods(job):
        (main,) = pod["containers"]
        assert main["image"] == "registry.example.com/ml/torch:2.13.0-py3.11"
        assert main["resources"] == {
            "requests": {"cpu": "16", "memory": "120Gi"},
            "limits": {"cpu": "16", "memory": "120Gi", "nvidia.com/gpu": "4"},
        }
        assert env_of(main) == {
            "PYTHONPATH": f"{PAYLOAD_DIR}:/data/lib",
            "DISTRAIN_KEY_FILE": f"{PAYLOAD_DIR}/key",
            "DISTRAIN_RANK_PREFIX": "1",
            "DISTRAIN_POD_ANNOTATIONS": f"{PODINFO_DIR}/annotations",
            "DISTRAIN_RELAY": "1",
            "PYTHONUSERBASE": "/opt/disttrain/pip",
            "NCCL_IB_DISABLE": "0",
            "NCCL_NET_GDR_LEVEL": "PHB",
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_DEBUG": "WARN",  # the user's --env wins over a preset
        }
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["payload"]["secret"]["secretName"] == "mnist-ddp-payload"
        assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
        assert volumes["data-0"]["persistentVolumeClaim"] == {
            "claimName": "datasets",
            "readOnly": True,
        }
        assert volumes["data-1"]["persistentVolumeClaim"] == {"claimName": "ckpt"}
        mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
        assert mounts["/data"] == {"name": "data-0", "mountPath": "/data", "readOnly": True}
        assert mounts["/checkpoints"] == {"name": "data-1", "mountPath": "/checkpoints"}
        assert mounts["/opt/disttrain/pip"]["name"] == "pip"
        assert pod["nodeSelector"] == {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "topology.kubernetes.io/zone": "us-east-1a",
        }
        assert pod["tolerations"] == [
            {
                "key": "nvidia.com/gpu",
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            },
            {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
            {"key": "spot", "operator": "Equal", "value": "true"},
        ]
        assert pod["priorityClassName"] == "high-priority"
        assert pod["serviceAccountName"] == "trainer"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert "schedulerName" not in pod
        (init,) = pod["initContainers"]
        assert init["image"] == main["image"]
        assert init["command"][-3:] == ["--", "einops==0.8.0", "timm[extras]>=1.0,<2"]
        assert env_of(init)["PYTHONUSERBASE"] == "/opt/disttrain/pip"
        assert "nvidia.com/gpu" not in init["resources"]["limits"]


def test_volcano_gang_scheduling() -> None:
    options = (("scheduler", "volcano"), ("queue", "research"), ("priority_class", "batch-low"))
    _, job = build(options, nodes=4)
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 4,
        "queue": "research",
        "priorityClass": "batch-low",
    }
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    assert all(pod["schedulerName"] == "volcano" for pod in pods(job))
    _, elastic = build((("scheduler", "volcano"), ("elastic", "2:6")), nodes=4)
    assert elastic["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 2}


def test_shm_can_be_turned_off() -> None:
    for value in ("0", "none", "off"):
        _, job = build((("shm", value),))
        for pod in pods(job):
            assert [v["name"] for v in pod["volumes"]] == ["payload", "podinfo"]
            mounts = [m["name"] for m in pod["containers"][0]["volumeMounts"]]
            assert mounts == ["payload", "podinfo"]


# --- TFJob ---------------------------------------------------------------------------------


def test_tfjob_chief_and_workers() -> None:
    versions = {"python": "3.11.7", "tensorflow": "2.21.0"}
    options = (
        ("gpus", "2"),
        ("volume", "data:/data"),
        ("scheduler", "volcano"),
        ("nccl", "socket"),
    )
    spec = job_spec(framework="tensorflow", nproc=1, options=options)
    payload, job = manifests(spec, parse_options(spec.options), FILES, versions)
    validate_manifest(job)
    assert payload["kind"] == "ConfigMap"
    assert job["kind"] == "TFJob" and job["apiVersion"] == "kubeflow.org/v1"
    specs = replica_specs(job)
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "Worker": 2}
    assert job["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 3}
    for replica in specs.values():
        assert replica["restartPolicy"] == "OnFailure"
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow"
        assert container["image"] == "tensorflow/tensorflow:2.21.0-gpu"
        assert container["command"] == [
            "python",
            "-m",
            "jupyter_disttrain.runtime.worker",
            "/opt/disttrain/payload/payload.pkl",
        ]
        assert container["ports"] == [
            {"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}
        ]
        assert env_of(container)["NCCL_IB_DISABLE"] == "1"
    one = tfjob(job_spec(framework="tensorflow", nodes=1, nproc=1), K8sOptions(), FILES, versions)
    validate_manifest(one)
    assert list(replica_specs(one)) == ["Chief"]


# --- No shell, ever ------------------------------------------------------------------------


def test_user_text_never_reaches_a_shell() -> None:
    options = (("pip", "torchvision>=0.18,<1"), ("pip", "einops"))
    payload, job = build(options, env=(("GREETING", "$(HOME) $HOME `id`"),))
    items = argv_items(job)
    assert not {"sh", "bash", "/bin/sh", "/bin/bash", "-c"} & set(items)
    assert not any(marker in item for item in items for marker in ("$", "`", "HOME", "id -u"))
    for pod in pods(job):
        (init,) = pod["initContainers"]
        assert init["command"] == [
            "python",
            "-m",
            "pip",
            "install",
            "--user",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-input",
            "--",
            "torchvision>=0.18,<1",
            "einops",
        ]
        # No shell sees environment values; the kubelet expands $(VAR) in them and
        # reads $$ as $, so doubling every $ hands the value over unchanged.
        assert env_of(pod["containers"][0])["GREETING"] == "$$(HOME) $$HOME `id`"
        assert env_of(init)["GREETING"] == "$$(HOME) $$HOME `id`"
    # The cell itself only travels inside the payload object, byte for byte.
    assert base64.b64decode(payload["binaryData"]["payload.pkl"]) == PAYLOAD
    assert CELL not in str(job)


@pytest.mark.parametrize(
    "spec", ["x;rm -rf /", "numpy; sh -c id", "$(whoami)", "`id`", "--index-url=http://x", "a b"]
)
def test_pip_specs_that_are_not_plain_requirements_are_refused(spec: str) -> None:
    with pytest.raises(OptionValueError, match=r"--pip .* is not a plain requirement"):
        parse_options([("pip", spec)])
    with pytest.raises(OptionValueError):
        K8sOptions(pip=(spec,))


# --- Payload object ------------------------------------------------------------------------


def test_payload_configmap_round_trips_files() -> None:
    obj = payload_object("mnist-ddp", "ml", FILES, secret=False)
    assert obj["apiVersion"] == "v1" and obj["kind"] == "ConfigMap" and obj["immutable"] is True
    assert obj["metadata"]["name"] == "mnist-ddp-payload" and obj["metadata"]["namespace"] == "ml"
    keys = {item["path"]: item["key"] for item in payload_items(FILES)}
    assert keys["jupyter_disttrain/runtime/worker.py"] == "jupyter_disttrain.runtime.worker.py"
    for path, data in FILES.items():
        assert "/" not in keys[path]
        assert base64.b64decode(obj["binaryData"][keys[path]]) == data
    secret = payload_object("mnist-ddp", None, FILES, secret=True)
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque" and "binaryData" not in secret
    assert secret["data"] == obj["binaryData"] and "namespace" not in secret["metadata"]


def test_payload_over_one_mib_is_refused_with_advice() -> None:
    overhead = len("payload.pkl")
    at_limit = {"payload.pkl": b"x" * (MAX_PAYLOAD_BYTES - overhead)}
    payload_object("big", None, at_limit, secret=False)
    too_big = {"payload.pkl": b"x" * (MAX_PAYLOAD_BYTES + 400_000), "a.py": b"y"}
    with pytest.raises(PayloadTooLarge) as info:
        manifests(job_spec(), K8sOptions(), too_big, VERSIONS)
    err = info.value
    assert isinstance(err, SpecError) and err.limit == MAX_PAYLOAD_BYTES
    assert err.size == MAX_PAYLOAD_BYTES + 400_000 + overhead + 1 + len("a.py")
    message = str(err)
    assert f"{err.size:,} bytes" in message and "1,048,576 bytes" in message
    assert "payload.pkl" in message and "--volume" in message and "inside the cell" in message
    with pytest.raises(PayloadTooLarge, match="a Secret can hold"):
        payload_object("big", None, too_big, secret=True)


@pytest.mark.parametrize("path", ["/etc/passwd", "../x.py", "a//b.py", "a/./b.py", "a b.py"])
def test_payload_paths_must_be_plain_relative(path: str) -> None:
    with pytest.raises(ValueError, match="not a plain relative path"):
        payload_items([path])


def test_payload_paths_that_collide_or_lack_the_payload_are_refused() -> None:
    with pytest.raises(ValueError, match="unique key"):
        payload_items(["a.b/c.py", "a/b.c.py"])
    with pytest.raises(ValueError, match=r"payload\.pkl"):
        pytorchjob(job_spec(), K8sOptions(), ["jupyter_disttrain/__init__.py"], VERSIONS)


def test_with_owner_links_the_payload_to_the_created_job() -> None:
    payload, job = build((("namespace", "ml"),))
    created = {**job, "metadata": {**job["metadata"], "uid": "1234-abcd"}}
    owned = with_owner(payload, created)
    assert owned["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": "mnist-ddp",
            "uid": "1234-abcd",
        }
    ]
    assert "ownerReferences" not in payload["metadata"]
    again = with_owner(owned, created)
    assert again["metadata"]["ownerReferences"] == owned["metadata"]["ownerReferences"]
    with pytest.raises(ValueError, match="uid"):
        with_owner(payload, job)
    elsewhere = {**created, "metadata": {**created["metadata"], "namespace": "other"}}
    with pytest.raises(ValueError, match="namespace"):
        with_owner(payload, elsewhere)


# --- YAML export ---------------------------------------------------------------------------


def test_render_yaml_round_trips_in_creation_order() -> None:
    objs = manifests(job_spec(), parse_options(EVERY_OPTION), FILES, VERSIONS)
    created = {**objs[1], "metadata": {**objs[1]["metadata"], "uid": "u-1"}}
    owned = [with_owner(objs[0], created), {**created, "status": {"conditions": []}}]
    text = render_yaml(owned)
    assert text.startswith("# ") and "no ownerReference" in text and "kubectl delete -f" in text
    assert "&id" not in text and "!!" not in text
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["Secret", "PyTorchJob"]
    assert docs == objs  # uid, ownerReferences and status are dropped again
    validate_manifest(docs[1])
    assert render_yaml(objs) == text


def test_a_printed_plan_shows_a_placeholder_for_the_job_key_and_the_secret_is_0400() -> None:
    from jupyter_disttrain.backends.kubernetes.yaml import KEY_PLACEHOLDER
    from jupyter_disttrain.runtime.jobkey import KEY_FILE

    opts = parse_options([("payload-secret", "")])
    objs = manifests(job_spec(), opts, {**FILES, KEY_FILE: b"k" * 32}, VERSIONS)
    printed = render_yaml(objs, show_key=False)
    secret = next(yaml.safe_load_all(printed))
    assert secret["data"][KEY_FILE] == KEY_PLACEHOLDER and "placeholder" in printed
    assert base64.b64encode(b"k" * 32).decode() not in printed
    exported = next(yaml.safe_load_all(render_yaml(objs)))
    assert base64.b64decode(exported["data"][KEY_FILE]) == b"k" * 32
    volume = objs[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["defaultMode"] == 0o400


CONFLICTS: list[tuple[dict[str, Any], list[tuple[str, str]], list[str]]] = [
    ({"nodes": 5}, [("elastic", "2:4")], ["--nodes 5", "between 2 and 4"]),
    ({"framework": "tensorflow", "nproc": 1}, [("elastic", "1:2")], ["--elastic", "pytorch"]),
    ({"framework": "tensorflow", "nproc": 2}, [], ["--nproc 2", "--nproc 1"]),
    ({"nproc": 8}, [("gpus", "4")], ["--nproc 8", "--gpus 4", "--dist-backend gloo"]),
    ({"env": (("PET_NNODES", "9"),)}, [], ["PET_NNODES", "--nodes"]),
    ({"env": (("PYTHONUSERBASE", "/x"),)}, [("pip", "einops")], ["PYTHONUSERBASE", "--pip"]),
]


@pytest.mark.parametrize(("changes", "options", "words"), CONFLICTS)
def test_options_that_cannot_run_the_spec(
    changes: dict[str, Any], options: list[tuple[str, str]], words: list[str]
) -> None:
    versions = {**VERSIONS, "tensorflow": "2.21.0"}
    with pytest.raises(ConflictingOptionsError) as info:
        manifests(job_spec(**changes), parse_options(options), FILES, versions)
    for word in words:
        assert word in str(info.value)


def test_more_processes_than_gpus_is_fine_with_gloo() -> None:
    _, job = build((("gpus", "1"),), nproc=4, dist_backend="gloo")
    assert job["spec"]["nprocPerNode"] == "4"


# --- Default images ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "image"),
    [
        ("2.13.0+cpu", "pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime"),
        ("2.7.1", "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"),
        ("2.5.1+cu124", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
        ("2.3", "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"),
        ("2.0.1", "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-runtime"),
    ],
)
def test_default_pytorch_image_follows_the_torch_version(torch: str, image: str) -> None:
    assert default_image("pytorch", {"python": "3.11.7", "torch": torch}) == image


def test_default_image_is_configurable_and_refuses_unknown_versions() -> None:
    site = ImagePolicy(templates={"pytorch": "registry.local/torch:{torch}-py{python}"})
    versions = {"python": "3.12.4", "torch": "2.13.0+cu128"}
    assert default_image("pytorch", versions, policy=site) == "registry.local/torch:2.13.0-py3.12"
    assert default_image("tensorflow", {"tensorflow": "2.21.0"}) == "tensorflow/tensorflow:2.21.0"
    for bad in ({"torch": "2.14.0.dev20260501"}, {"torch": "1.13.1"}, {"python": "3.11"}):
        with pytest.raises(ImageError, match="--image"):
            default_image("pytorch", bad)
    with pytest.raises(ImageError, match="--image"):
        manifests(job_spec(), K8sOptions(), FILES, {"python": "3.11.7"})


# --- The schema check itself ---------------------------------------------------------------


def test_schema_check_catches_what_the_api_server_would_refuse_or_drop() -> None:
    _, job = build((("gpus", "2"),))
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    container = master["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    limits["nvidia.com/gpu"] = 2  # int-or-string: an integer is fine too
    assert manifest_errors(job) == []

    def errors_after(change: Any) -> list[str]:
        bad = yaml.safe_load(yaml.safe_dump(job))
        change(bad)
        return manifest_errors(bad)

    def misspelt(j: Obj) -> None:
        j["spec"]["pytorchReplicaSpecs"]["Master"]["restartpolicy"] = "Never"

    def duplicate_env(j: Obj) -> None:
        replica = j["spec"]["pytorchReplicaSpecs"]["Master"]
        replica["template"]["spec"]["containers"][0]["env"] *= 2

    def huge(j: Obj) -> None:
        j["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2**31

    def null(j: Obj) -> None:
        j["spec"]["nprocPerNode"] = None

    def quantity(j: Obj) -> None:
        replica = j["spec"]["pytorchReplicaSpecs"]["Master"]
        replica["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8GB"

    def name(j: Obj) -> None:
        j["metadata"]["name"] = "MNIST.ddp"

    def label(j: Obj) -> None:
        j["metadata"]["labels"]["bad key"] = "x"

    def api_version(j: Obj) -> None:
        j["apiVersion"] = "kubeflow.org/v2"

    assert "restartpolicy" in " ".join(errors_after(misspelt))
    assert "duplicate entry" in " ".join(errors_after(duplicate_env))
    assert "maximum" in " ".join(errors_after(huge))
    assert "None is not of type 'string'" in " ".join(errors_after(null))
    assert "does not match" in " ".join(errors_after(quantity))
    assert "metadata.name" in " ".join(errors_after(name))
    assert "metadata.labels" in " ".join(errors_after(label))
    assert "not served" in " ".join(errors_after(api_version))
    with pytest.raises(ManifestError, match="restartpolicy"):
        bad = yaml.safe_load(yaml.safe_dump(job))
        misspelt(bad)
        validate_manifest(bad)
