"""Real ``torchrun`` across the emulator's pods."""

from __future__ import annotations

import os

import pytest

from tests.k8s_emulator_test.clusters import (
    NS,
    Cluster,
    pytorchjob,
)

# --- real torchrun -----------------------------------------------------------------------------

ALL_REDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchrun_gloo_all_reduce_across_two_pods(cluster: Cluster) -> None:
    pytest.importorskip("torch")
    cluster.core.create_namespaced_config_map(
        NS, {"metadata": {"name": "train"}, "data": {"allreduce.py": ALL_REDUCE}}
    )
    command = ["torchrun", "/opt/train/allreduce.py"]
    job = pytorchjob("ddp", command, workers=1, nprocPerNode="1")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["volumes"] = [{"name": "train", "configMap": {"name": "train"}}]
        pod["containers"][0]["volumeMounts"] = [{"name": "train", "mountPath": "/opt/train"}]
        pod["containers"][0]["env"] = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    cluster.create(job)
    cluster.wait_state("ddp", "Succeeded", timeout=120)
    # (torchrun may add warnings, e.g. when the rendezvous store host exits first)
    assert "rank 0/2 sum 3" in cluster.log("ddp-master-0").splitlines()
    assert "rank 1/2 sum 3" in cluster.log("ddp-worker-0").splitlines()


def test_process_environment_is_the_pods_not_the_test_runners(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8S_EMULATOR_TEST_LEAK", "1")
    check = "import os; print('K8S_EMULATOR_TEST_LEAK' in os.environ, os.environ['HOME'])"
    cluster.create(pytorchjob("env", ["python", "-c", check]))
    cluster.wait_state("env", "Succeeded")
    leaked, home = cluster.log("env-master-0").split()
    assert leaked == "False" and home != os.environ["HOME"]
