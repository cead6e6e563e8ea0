"""Rendezvous and store timeouts scaled to the world size, and where the manifests carry them
(validated against the CRDs in /work/shared/k8s-crds)."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.backends.kubernetes.rendezvous import (
    ENV,
    rdzv_conf_items,
    rendezvous_conf,
    rendezvous_env,
)
from tests.backends.kubernetes.kinds import test_trainjob as trainjobs
from tests.backends.kubernetes.test_manifests import build, pods


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def test_torch_defaults_hold_below_a_thousand_ranks() -> None:
    assert rendezvous_conf(999) == {} and rendezvous_env(8) == {} and rdzv_conf_items(64) == []


def test_timeouts_grow_as_the_store_barrier_does() -> None:
    assert rendezvous_conf(1000) == {"read_timeout": "66", "join_timeout": "660", "timeout": "660"}
    assert rendezvous_conf(8192) == {
        "read_timeout": "110",
        "join_timeout": "1092",
        "timeout": "1092",
    }
    assert rendezvous_env(8192) == {ENV: "read_timeout=110,join_timeout=1092,timeout=1092"}


def test_a_pytorchjob_of_1024_nodes_gives_torchrun_the_scaled_conf() -> None:
    _, job = build(nodes=1024, nproc=8)  # validated against the PyTorchJob CRD
    for pod in pods(job):
        env = env_of(pod["containers"][0])
        assert env[ENV] == "read_timeout=110,join_timeout=1092,timeout=1092", env
    _, small = build(nodes=4, nproc=8)
    assert all(ENV not in env_of(pod["containers"][0]) for pod in pods(small))


def test_an_elastic_pytorchjob_carries_it_in_its_policy() -> None:
    _, job = build((("elastic", "512:1024"),), nodes=1024, nproc=8, max_restarts=3)
    assert job["spec"]["elasticPolicy"]["rdzvConf"] == [
        {"key": "read_timeout", "value": "110"},
        {"key": "join_timeout", "value": "1092"},
        {"key": "timeout", "value": "1092"},
    ]
    assert all(ENV not in env_of(pod["containers"][0]) for pod in pods(job))  # the operator's


def test_a_trainjob_of_1024_nodes_gives_torchrun_the_scaled_conf() -> None:
    job = trainjobs.build(nodes=1024, nproc=8)  # validated against the TrainJob CRD
    env = {item["name"]: item["value"] for item in job["spec"]["trainer"]["env"]}
    assert env[ENV] == "read_timeout=110,join_timeout=1092,timeout=1092"


def test_a_tfjob_gets_none() -> None:
    _, job = build((("image", "tf:2.16"),), nodes=1024, nproc=1, framework="tensorflow")
    assert all(ENV not in env_of(pod["containers"][0]) for pod in pods(job))
