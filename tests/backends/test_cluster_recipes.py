"""Cluster recipes as options: Run:ai projects and GPU fractions, host networking (both APIs)."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_disttrain.backends.k8s_options import OptionError, parse_options
from jupyter_disttrain.backends.k8s_trainjob import trainjob
from jupyter_disttrain.backends.manifests import pytorchjob
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
)  # fmt: skip
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
