"""The emulator's ``jax-distributed`` ClusterTrainingRuntime and Trainer's JAX plugin."""

from __future__ import annotations

import json

from tests.k8s_emulator import Emulator
from tests.k8s_emulator_test.trainjobs import Cluster, cluster, env_of, trainer, trainjob

__all__ = ["cluster", "trainer"]  # the fixtures this module uses

JAX_ENV = ["JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "PET_NNODES"]
PRINT_JAX_ENV = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {JAX_ENV}}}))"


def test_a_trainjob_on_jax_distributed_gets_the_jax_plugins_env(
    cluster: Cluster, trainer: Emulator
) -> None:
    runtime = cluster.co.get_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "jax-distributed"
    )
    assert runtime["metadata"]["labels"] == {"trainer.kubeflow.org/framework": "jax"}
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "jax": {}}
    cluster.create(
        trainjob(
            "jx",
            ["python", "-c", PRINT_JAX_ENV],
            runtime_ref={"name": "jax-distributed"},
            trainer={"numNodes": 2},
        )
    )
    cluster.ended("jx")
    rjob = cluster.jobset("jx")["spec"]["replicatedJobs"][0]
    assert rjob["template"]["spec"]["completions"] == 2
    node = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
    assert node["image"] == "nvcr.io/nvidia/jax:25.10-py3" and node["ports"] == [
        {"containerPort": 29500}
    ]
    assert env_of(node) == {
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
        "JAX_COORDINATOR_ADDRESS": "jx-node-0-0.jx:29500",
    }
    coordinators = set()
    for rank, pod in enumerate(cluster.pods("jx")):
        printed = json.loads(trainer.pod_log(pod.metadata.name).strip())
        assert printed["JAX_PROCESS_ID"] == str(rank) and printed["JAX_NUM_PROCESSES"] == "2"
        assert printed["PET_NNODES"] is None  # no torch plugin on this runtime
        host, _, port = printed["JAX_COORDINATOR_ADDRESS"].partition(":")
        if trainer.network_mode == "pods":  # as written
            assert (host, port) == ("jx-node-0-0.jx", "29500")
        else:
            assert host == "127.0.0.1" and port.isdigit()  # jx-node-0-0.jx:29500, resolved here
        coordinators.add(printed["JAX_COORDINATOR_ADDRESS"])
    assert len(coordinators) == 1  # every process reaches the same coordinator
