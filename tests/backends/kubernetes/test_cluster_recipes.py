"""Cluster recipes as options: Run:ai, host networking, --data staging, --prometheus (both APIs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain.backends.kubernetes.kinds.trainjob import trainjob
from jupyter_disttrain.backends.kubernetes.manifests import manifests, pytorchjob
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.kubernetes.options import OptionError
from jupyter_disttrain.spec import JobSpec
from tests.crd_schema import validate_manifest

FILES = ["payload.pkl"]
VERSIONS = {"python": "3.11.7", "torch": "2.13.0"}


def build(api: str, *options: tuple[str, str], name: str = "recipe") -> dict[str, Any]:
    spec = JobSpec(name, nodes=2, nproc=1, backend="kubernetes")
    opts = parse_options(options)
    job = (trainjob if api == "trainjob" else pytorchjob)(spec, opts, FILES, VERSIONS)
    validate_manifest(job)
    return job


def pod_templates(job: dict[str, Any]) -> list[dict[str, Any]]:
    if job["kind"] == "TrainJob":
        (patch,) = job["spec"]["runtimePatches"]
        (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        return [rjob["template"]["spec"]["template"]]
    return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


@pytest.mark.parametrize("api", ["pytorchjob", "trainjob"])
def test_a_runai_project_sets_namespace_label_scheduler_and_gpu_fraction(api: str) -> None:
    job = build(api, ("runai_project", "team-a"), ("gpu_fraction", "0.5"))
    assert job["metadata"]["namespace"] == "runai-team-a"
    assert job["metadata"]["labels"]["project"] == "team-a"
    for template in pod_templates(job):
        assert template["metadata"]["labels"]["project"] == "team-a"
        assert template["metadata"]["annotations"]["gpu-fraction"] == "0.5"
        if api == "pytorchjob":  # a TrainJob's runtimePatches cannot name a scheduler:
            assert template["spec"]["schedulerName"] == "runai-scheduler"
        else:  # Run:ai enforces its scheduler in the project's namespace
            assert "schedulerName" not in template["spec"]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ((("gpu_fraction", "0.5"),), "needs --runai-project"),
        ((("runai_project", "a"), ("gpu_fraction", "1.5")), "between 0 and 1"),
        ((("runai_project", "a"), ("gpu_fraction", "0.5"), ("gpus", "1")), "without --gpus"),
        ((("runai_project", "a"), ("namespace", "other")), "drop --namespace"),
        ((("runai_project", "a"), ("scheduler", "volcano")), "drop --scheduler"),
    ],
)
def test_runai_options_that_cannot_work_name_the_fix(
    options: tuple[tuple[str, str], ...], words: str
) -> None:
    with pytest.raises(OptionError, match=words):
        parse_options(options)


def test_host_network_uses_the_nodes_network_and_a_port_of_its_own() -> None:
    one = build("pytorchjob", ("host_network", "true"), name="job-one")
    two = build("pytorchjob", ("host_network", "true"), name="job-two")
    ports = []
    for job in (one, two):
        for template in pod_templates(job):
            pod = template["spec"]
            assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
            (port,) = pod["containers"][0]["ports"]
            assert port["name"] == "pytorchjob-port" and 20000 <= port["containerPort"] < 30000
            ports.append(port["containerPort"])
    assert len(set(ports[:2])) == 1 and ports[0] != ports[-1]  # one per job, not 23456
    with pytest.raises(OptionError, match="--host-network cannot be set on a TrainJob"):
        build("trainjob", ("host_network", "true"))


# --- --data and --prometheus -------------------------------------------------------------


ALL_RECIPES = (
    ("data", "s3://bucket/x:/data"),
    ("prometheus", "true"),
    ("runai_project", "team-a"),
)


def containers(template: dict[str, Any], key: str = "containers") -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in template["spec"].get(key, [])}


def test_every_recipe_at_once_on_a_pytorchjob_is_valid_and_complete() -> None:
    spec = JobSpec("recipes", nodes=2, nproc=1, backend="kubernetes")
    opts = parse_options((*ALL_RECIPES, ("host_network", "true")))
    objs = manifests(spec, opts, {"payload.pkl": b"x"}, VERSIONS)
    payload, job, service, monitor = objs
    validate_manifest(job)
    validate_manifest(monitor)
    assert job["metadata"]["namespace"] == "runai-team-a" == service["metadata"]["namespace"]
    for template in pod_templates(job):
        pod = template["spec"]
        assert pod["hostNetwork"] is True and pod["schedulerName"] == "runai-scheduler"
        (stage,) = containers(template, "initContainers").values()
        assert (
            stage["name"] == "data-stage"
            and stage["image"] == containers(template)["pytorch"]["image"]
        )
        assert stage["command"] == [
            "python",
            "-m",
            "jupyter_disttrain.runtime.stage",
            "s3://bucket/x",
            "/data",
        ]
        assert stage["terminationMessagePolicy"] == "FallbackToLogsOnError"
        stage_mounts = {m["mountPath"]: m["name"] for m in stage["volumeMounts"]}
        main = containers(template)["pytorch"]
        main_mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
        assert stage_mounts["/data"] == main_mounts["/data"]["name"] == "staged-0"
        assert "readOnly" not in main_mounts["/data"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["staged-0"] == {"name": "staged-0", "emptyDir": {}}
        env = {e["name"]: e for e in main["env"]}
        assert env["DISTRAIN_METRICS_PORT"]["value"] == "9464"
        assert env["DISTRAIN_METRICS_ADDR"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "status.podIP"}
        }
        assert {"name": "metrics", "containerPort": 9464, "protocol": "TCP"} in main["ports"]
    assert service["kind"] == "Service" and service["metadata"]["name"] == "recipes-metrics"
    assert service["spec"]["selector"] == {
        "training.kubeflow.org/job-name": "recipes",
        "training.kubeflow.org/job-role": "master",
    }
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9464, "targetPort": 9464, "protocol": "TCP"}
    ]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(service["metadata"]["labels"][k] == v for k, v in selector.items())
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]
    assert payload["kind"] == "ConfigMap"


def test_every_recipe_a_trainjob_can_carry_copies_in_the_training_container() -> None:
    job = build("trainjob", *ALL_RECIPES, ("data", "https://example.com/vocab.txt:/vocab:rw"))
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == [
        "python",
        "-m",
        "jupyter_disttrain.runtime.stage",
        "s3://bucket/x",
        "/data",
        "https://example.com/vocab.txt",
        "/vocab",
        "--then",
        "python",
        "-u",
        "-m",
        "jupyter_disttrain.runtime.podlaunch",
        "/opt/disttrain/payload/payload.pkl",
    ]
    assert {e["name"] for e in trainer["env"]} >= {"DISTRAIN_METRICS_PORT", "DISTRAIN_METRICS_ADDR"}
    (template,) = pod_templates(job)
    assert "initContainers" not in template["spec"]
    mounts = {m["mountPath"]: m["name"] for m in containers(template)["node"]["volumeMounts"]}
    assert mounts["/data"] == "staged-0" and mounts["/vocab"] == "staged-1"
    assert {"name": "staged-1", "emptyDir": {}} in template["spec"]["volumes"]
    with pytest.raises(OptionError, match="--host-network cannot be set on a TrainJob"):
        build("trainjob", *ALL_RECIPES, ("host_network", "true"))


def test_data_on_a_claim_needs_no_empty_dir_and_data_image_runs_the_copier() -> None:
    job = build(
        "pytorchjob",
        ("volume", "datasets:/datasets"),
        ("data", "/datasets/raw:/data:ro"),
        ("data", "gs://b/tok:/datasets/tok"),
        ("data_image", "tools/py-gcs:1"),
    )
    for template in pod_templates(job):
        stage = containers(template, "initContainers")["data-stage"]
        assert stage["image"] == "tools/py-gcs:1"
        assert "PYTHONUSERBASE" not in {e["name"] for e in stage["env"]}
        stage_mounts = {m["mountPath"]: m for m in stage["volumeMounts"]}
        assert stage_mounts["/datasets"]["name"] == "data-0" and "/datasets/tok" not in stage_mounts
        main_mounts = {m["mountPath"]: m for m in containers(template)["pytorch"]["volumeMounts"]}
        assert main_mounts["/data"] == {"name": "staged-0", "mountPath": "/data", "readOnly": True}
        assert "staged-1" not in {v["name"] for v in template["spec"]["volumes"]}


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ((("data", "data/x:/data"),), "neither a URL nor an absolute path"),
        ((("data", "ftp://h/x:/data"),), "use s3://, gs://, gcs://, https://, http://"),
        ((("data", "s3://b/x"),), "is not SRC:/path"),
        ((("data", "s3://b/x:/opt/disttrain/d"),), "mounts over /opt/disttrain"),
        ((("data", "/mnt/raw:/data"),), "no --volume is mounted there"),
        ((("data", "s3://b/x:/d"), ("data", "gs://b/y:/d")), "two --data options stage into /d"),
        ((("volume", "c:/d:ro"), ("data", "s3://b/x:/d/x")), "read-only --volume"),
        ((("data_image", "tools/x:1"),), "add --data or remove --data-image"),
        ((("prometheus", "23456"),), "use a port in 1024-65535"),
        ((("prometheus", "many"),), "is not a whole number"),
    ],
)
def test_data_and_prometheus_mistakes_name_the_fix(
    options: tuple[tuple[str, str], ...], words: str
) -> None:
    with pytest.raises(OptionError, match=re.escape(words)):
        parse_options(options)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ((("data", "s3://b/x:/data:ro"),), "drop :ro, or add --kubeflow-api pytorchjob"),
        ((("data", "s3://b/x:/data"), ("data_image", "t/x:1")), "remove --data-image, or add"),
    ],
)
def test_what_a_trainjob_cannot_stage_names_the_fix(
    options: tuple[tuple[str, str], ...], words: str
) -> None:
    with pytest.raises(OptionError, match=re.escape(words)):
        build("trainjob", *options)


def test_prometheus_needs_pytorch() -> None:
    spec = JobSpec("tf", nodes=2, nproc=1, backend="kubernetes", framework="tensorflow")
    with pytest.raises(OptionError, match="needs --framework pytorch"):
        manifests(spec, parse_options([("prometheus", "true")]), {"payload.pkl": b"x"}, VERSIONS)


def test_render_prints_every_recipe_for_both_apis(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    recipes = ["--data", "s3://bucket/x:/data", "--prometheus", "--runai-project", "team-a"]
    for api, extra in (("pytorchjob", ["--host-network"]), ("trainjob", [])):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_disttrain.cli",
                "render",
                "--backend",
                "kubernetes",
                "--nodes",
                "2",
                "--kubeflow-api",
                api,
                *recipes,
                *extra,
                str(script),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "KUBECONFIG": str(tmp_path / "none")},
        )
        assert done.returncode == 0, done.stderr
        docs = [d for d in yaml.safe_load_all(done.stdout) if d]
        kinds = [d["kind"] for d in docs]
        assert kinds == [
            "Secret",
            "TrainJob" if api == "trainjob" else "PyTorchJob",
            "Service",
            "ServiceMonitor",
        ], kinds
        for doc in (docs[1], docs[3]):
            validate_manifest(doc)
        text = done.stdout
        assert "jupyter_disttrain.runtime.stage" in text and "runai-team-a" in text
        assert ("hostNetwork: true" in text) == (api == "pytorchjob")
