"""Kubeflow Trainer v2 TrainJobs: the manifest (valid against the v2.3.0 CRD) and its state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes.kinds.trainjob import trainjob, trainjob_condition
from jupyter_disttrain.backends.kubernetes.manifests import worker_command
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.kubernetes.options import OptionError
from jupyter_disttrain.backends.kubernetes.template import PAYLOAD_DIR
from jupyter_disttrain.spec import JobSpec
from tests.conftest import REPO
from tests.crd_schema import validate_manifest

FILES = ["payload.pkl", "jupyter_disttrain/runtime/worker.py"]
VERSIONS = {"python": "3.11.7", "torch": "2.13.0"}


def build(*options: tuple[str, str], **spec: Any) -> dict[str, Any]:
    job = JobSpec(
        spec.pop("name", "tj"),
        nodes=spec.pop("nodes", 2),
        nproc=spec.pop("nproc", 2),
        backend="kubernetes",
        **spec,
    )
    manifest = trainjob(job, parse_options(options), FILES, VERSIONS)
    validate_manifest(manifest)
    return manifest


def pod_patch(manifest: dict[str, Any]) -> dict[str, Any]:
    (patch,) = manifest["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    template: dict[str, Any] = rjob["template"]["spec"]["template"]
    return template


def test_render_prints_a_trainjob_for_kueue_with_no_user_text_on_a_command_line(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\nprint('secret $TOKEN')\n")
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none")}  # no cluster to ask
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "render",
            "--backend",
            "kubernetes",
            "--kubeflow-api",
            "trainjob",
            "--nodes",
            "2",
            "--nproc",
            "2",
            "--queue",
            "team-a",
            "--env",
            "LR=0.1",
            "--name",
            "tj-render",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["Secret", "TrainJob"]
    job = docs[1]
    validate_manifest(job)
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert job["spec"]["trainer"]["numNodes"] == 2 and job["spec"]["trainer"]["numProcPerNode"] == 2
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["spec"]["suspend"] is True
    command = job["spec"]["trainer"]["command"]
    assert command == worker_command("pytorch") and "args" not in job["spec"]["trainer"]
    assert "secret $TOKEN" not in out.stdout and "LR" not in " ".join(command)
    env = {e["name"]: e["value"] for e in job["spec"]["trainer"]["env"]}
    assert env["LR"] == "0.1" and env["PYTHONPATH"] == PAYLOAD_DIR
    assert not any(name.startswith("PET_") for name in env)  # the torch plugin sets those
    # Without a cluster to ask, render defaults to the current API.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "render",
            "--backend",
            "kubernetes",
            "--name",
            "tj-default",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env | dict(os.environ) | {"KUBECONFIG": str(tmp_path / "none")},
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert [d["kind"] for d in yaml.safe_load_all(out.stdout)] == ["Secret", "TrainJob"]


def test_every_pod_option_becomes_a_runtime_patch() -> None:
    job = build(
        ("volume", "data:/data:ro"),
        ("shm", "8Gi"),
        ("node_selector", "gpu=a100"),
        ("toleration", "nvidia.com/gpu=present:NoSchedule"),
        ("service_account", "trainer"),
        ("image_pull_secret", "regcred"),
        ("gpus", "2"),
        ("cpu", "8"),
        ("memory", "32Gi"),
        ("runtime", "torch-custom"),
        ("image", "registry.example.com/torch:2.13"),
        timeout=600.5,
        grace_period=20,
    )
    spec = job["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-custom",
    }
    assert spec["activeDeadlineSeconds"] == 601 and "suspend" not in spec
    trainer = spec["trainer"]
    assert trainer["image"] == "registry.example.com/torch:2.13"
    assert trainer["resourcesPerNode"] == {
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
    }
    pod = pod_patch(job)
    assert pod["metadata"]["labels"]["disttrain.jupyter.org/job"] == "tj"
    body = pod["spec"]
    volumes = {v["name"]: v for v in body["volumes"]}
    assert volumes["payload"]["configMap"]["name"] == "tj-payload"
    assert volumes["data-0"]["persistentVolumeClaim"] == {"claimName": "data", "readOnly": True}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    (container,) = body["containers"]
    assert container["name"] == "node"
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {PAYLOAD_DIR, "/data", "/dev/shm"}
    assert body["nodeSelector"] == {"gpu": "a100"}
    assert body["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert body["serviceAccountName"] == "trainer"
    assert body["imagePullSecrets"] == [{"name": "regcred"}]
    assert body["terminationGracePeriodSeconds"] == 25


@pytest.mark.parametrize(
    ("options", "spec", "words"),
    [
        ((("elastic", "2:4"),), {}, "--kubeflow-api pytorchjob"),
        ((("pip", "einops"),), {}, "--pip cannot be set on a TrainJob"),
        ((("priority_class", "high"),), {}, "--priority-class cannot be set"),
        ((), {"max_restarts": 2}, "JobSet failure policy"),
        ((), {"framework": "tensorflow", "nproc": 1}, "Trainer v2 has no tensorflow runtime"),
    ],
)
def test_what_a_trainjob_cannot_carry_is_refused_with_the_fix(
    options: tuple[tuple[str, str], ...], spec: dict[str, Any], words: str
) -> None:
    with pytest.raises(OptionError, match=words.replace("(", r"\(")):
        build(*options, **spec)


def test_kubeflow_api_values_are_checked() -> None:
    with pytest.raises(OptionError, match="use one of trainjob, pytorchjob"):
        parse_options([("kubeflow_api", "mpijob")])


def _job(conditions: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "tj", "labels": extra.pop("labels", {})}
    return {
        "metadata": meta,
        "spec": extra.pop("spec", {}),
        "status": {"conditions": conditions, **extra},
    }


def test_state_from_conditions_jobs_status_and_kueue() -> None:
    suspended = {
        "type": "Suspended",
        "status": "True",
        "reason": "Suspended",
        "message": "TrainJob is suspended",
    }
    queue = {"kueue.x-k8s.io/queue-name": "team-a"}
    queued = _job([suspended], labels=queue, spec={"suspend": True})
    assert trainjob_condition(queued) == (
        "Pending",
        "Queued",
        "waiting for Kueue admission in team-a",
    )
    starting = _job(
        [
            {
                "type": "Suspended",
                "status": "False",
                "reason": "Resumed",
                "message": "TrainJob is resumed",
            }
        ],
        jobsStatus=[{"name": "node", "ready": 0, "active": 1}],
    )
    assert trainjob_condition(starting) is not None
    assert trainjob_condition(starting)[0] == "Pending"  # type: ignore[index]
    running = _job([], jobsStatus=[{"name": "node", "ready": 1, "active": 1}])
    assert trainjob_condition(running)[0] == "Running"  # type: ignore[index]
    reporting = _job(
        [],
        jobsStatus=[{"name": "node", "ready": 1, "active": 1}],
        trainerStatus={
            "progressPercentage": 40,
            "estimatedRemainingSeconds": 300,
            "metrics": [{"name": "loss", "value": "0.31"}],
        },
    )
    assert trainjob_condition(reporting) == (
        "Running",
        "Running",
        "TrainJob tj is running, 40% done, about 5 min left (loss 0.31)",
    )
    done = _job(
        [
            {
                "type": "Complete",
                "status": "True",
                "reason": "AllJobsCompleted",
                "message": "jobset completed successfully",
            }
        ]
    )
    assert trainjob_condition(done) == (
        "Succeeded",
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    failed = _job(
        [
            {
                "type": "Failed",
                "status": "True",
                "reason": "FailedJobs",
                "message": "jobset failed due to one or more job failures",
            }
        ]
    )
    assert trainjob_condition(failed)[0] == "Failed"  # type: ignore[index]
    assert trainjob_condition({"metadata": {"name": "x"}}) is None


def test_pods_that_start_again_after_the_job_ran_read_restarting() -> None:
    """JobSet restarts a dead node's pod in place: its replicated job is not ready for a
    while, which reads as starting before the job ran and as a restart after it."""
    again = _job([], jobsStatus=[{"name": "node", "ready": 0, "active": 1}])
    assert trainjob_condition(again)[0] == "Pending"  # type: ignore[index]
    assert trainjob_condition(again, ran=True) == (
        "Restarting",
        "Restarting",
        "the TrainJob's pods are starting again",
    )
    finishing = _job([], jobsStatus=[{"name": "node", "ready": 0, "succeeded": 1}])
    assert trainjob_condition(finishing, ran=True)[0] != "Restarting"  # type: ignore[index]
    running = _job([], jobsStatus=[{"name": "node", "ready": 1, "active": 1}])
    assert trainjob_condition(running, ran=True)[0] == "Running"  # type: ignore[index]


def test_finished_initializers_and_nodes_before_complete_read_running() -> None:
    """An initializer that finished stays in ``jobsStatus`` (ready 0, succeeded 1) beside
    the nodes: ready nodes read Running, not starting; pods all ended before the TrainJob's
    ``Complete`` read Running/Finishing, not starting again."""
    initialized = [{"name": "dataset-initializer", "ready": 0, "succeeded": 1}]
    training = _job([], jobsStatus=[*initialized, {"name": "node", "ready": 2, "active": 2}])
    assert trainjob_condition(training) == ("Running", "Running", "TrainJob tj is running")
    starting = _job([], jobsStatus=[*initialized, {"name": "node", "ready": 0, "active": 2}])
    assert trainjob_condition(starting)[0] == "Pending"  # type: ignore[index]
    assert trainjob_condition(starting, ran=True)[0] == "Restarting"  # type: ignore[index]
    ended = _job([], jobsStatus=[*initialized, {"name": "node", "ready": 0, "succeeded": 1}])
    for ran in (False, True):
        assert trainjob_condition(ended, ran=ran) == (
            "Running",
            "Finishing",
            "TrainJob tj's pods have ended; not yet Complete",
        )
