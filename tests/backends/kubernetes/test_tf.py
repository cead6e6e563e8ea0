"""TensorFlow jobs as Kubeflow TFJobs, over HTTP with the real client, against the API emulator."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.events import Trust, parse_line
from jupyter_disttrain.payload import build_payload, package_version
from jupyter_disttrain.runtime import rankprefix
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_tf import notebook_training
from tests.crd_schema import validate_manifest
from tests.k8s_emulator.emulator import Emulator
from tests.waiting import wait_for


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """An emulated cluster (its kubelet runs pods on 127.0.0.1); the kubeconfig points at it."""
    with Emulator(env={"TF_CPP_MIN_LOG_LEVEL": "2"}) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


def objects(emulator: Emulator, name: str) -> dict[str, list[str]]:
    from kubernetes import client as k

    api = emulator.api_client()
    core, custom = k.CoreV1Api(api), k.CustomObjectsApi(api)
    selector = f"training.kubeflow.org/job-name={name}"
    out = {
        "tfjobs": [
            o["metadata"]["name"]
            for o in custom.list_namespaced_custom_object(
                "kubeflow.org", "v1", "default", "tfjobs"
            )["items"]
        ],
        "pods": [
            p.metadata.name
            for p in core.list_namespaced_pod("default", label_selector=selector).items
        ],
        "configmaps": [c.metadata.name for c in core.list_namespaced_config_map("default").items],
    }
    api.close()
    return out


def test_tfjob_yaml_matches_the_crd() -> None:
    spec = JobSpec("tf-yaml", nodes=3, backend="kubernetes", framework="tensorflow")
    payload = build_payload(
        "strategy.num_replicas_in_sync", {}, job=spec.name, framework="tensorflow"
    )
    docs = list(yaml.safe_load_all(str(KubernetesBackend().plan(spec, payload))))
    assert [d["kind"] for d in docs] == ["Secret", "TFJob"]
    job = docs[1]
    validate_manifest(job)
    replicas = job["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "Worker": 2}
    container = replicas["Chief"]["template"]["spec"]["containers"][0]
    assert container["name"] == "tensorflow"
    assert container["ports"][0]["name"] == "tfjob-port"
    assert container["command"] == [
        "python",
        "-m",
        "jupyter_disttrain.runtime.worker",
        "/opt/disttrain/payload/payload.pkl",
    ]
    version = package_version("tensorflow") or package_version("tensorflow-cpu")
    assert container["image"] == f"tensorflow/tensorflow:{version}"
    annotations = job["metadata"]["annotations"]
    assert annotations["disttrain.jupyter.org/tensorflow-version"] == version
    assert "disttrain.jupyter.org/torch-version" not in annotations


@pytest.mark.slow
def test_tutorial_cell_as_a_tfjob(cluster: Emulator) -> None:
    """The notebook's training cell, plus --backend kubernetes, through the magic."""
    line, body, namespace = notebook_training()
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_disttrain")
    shell.user_ns.update(namespace)
    shell.run_line_magic("distrain_config", "live=none")
    name = "tf-k8s"
    line = line.replace("-o job", "-o kjob") + f" --backend kubernetes --name {name}"
    started = time.monotonic()
    try:
        result = shell.run_cell_magic("distrain", line, body)
    finally:
        shell.run_line_magic("distrain_config", "live=auto")
    assert result["workers"] == 2 and result["accuracy"] > 0.85, result
    print(f"TFJob end to end: {time.monotonic() - started:.1f} s")
    kjob = shell.user_ns["kjob"]
    assert kjob.backend.name == "kubernetes" and kjob.status() == "Succeeded"
    snap = kjob.monitor.snapshot()
    assert [r["state"] for r in snap["ranks"]] == ["Succeeded", "Succeeded"]
    assert [r["pod"] or r["host"] for r in snap["ranks"]] == [f"{name}-chief-0", f"{name}-worker-0"]
    assert [row["step"] for row in kjob.metrics() if row["rank"] == 0] == list(range(60))
    # Each pod's log carries its rank's lines, prefixed: the chief is rank 0, worker-0 rank 1.
    kubeconfig = os.environ["KUBECONFIG"]
    key = kjob.backend.job_key(kjob.backend.connection(), name)
    assert key is not None  # the payload Secret holds the job's key
    trust = Trust.of(key, 2, 1)
    for pod, rank, task in ((f"{name}-chief-0", 0, "chief:0"), (f"{name}-worker-0", 1, "worker:0")):
        got = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "logs", pod],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert got.returncode == 0, got.stderr
        events = []
        for text in got.stdout.splitlines():
            prefix, rest = rankprefix.split(text)
            if prefix is not None:
                assert prefix == rank, text
                events.append(parse_line(rest, prefix, trust=trust))
        hello = next(e for e in events if e.kind == "hello")
        assert (hello.get("task"), hello.get("backend")) == (task, "tf-ring")
        assert len([e for e in events if e.kind == "metric"]) == 60  # a loss at every step
    assert "chief 0: test accuracy" in kjob.backend.logs(name, rank=0)
    assert "worker 0: test accuracy" in kjob.backend.logs(name, rank=1)
    got = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", "tfjobs"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert name in got.stdout and "Succeeded" in got.stdout, got.stdout + got.stderr
    # Another kernel re-attaches and rebuilds the result from the log streams.
    again = jobs.attach(name, KubernetesBackend())
    assert again.spec.framework == "tensorflow"
    assert again.result(timeout=60)["accuracy"] == result["accuracy"]
    assert KubernetesBackend().stop(name)
    empty = {"tfjobs": [], "pods": [], "configmaps": []}
    wait_for(lambda: objects(cluster, name) == empty, 60, lambda: objects(cluster, name))


@pytest.mark.slow
def test_failing_tfjob_worker_is_named(cluster: Emulator) -> None:
    cell = (
        "import time\n"
        "if strategy.cluster_resolver.task_type == 'worker':\n"
        "    raise ValueError('bad shard on ' + os.environ['HOSTNAME'])\n"
        "time.sleep(120)\n"
    )
    spec = JobSpec(
        "tf-k8s-fail", nodes=2, backend="kubernetes", framework="tensorflow", timeout=150
    )
    payload = build_payload(cell, {"os": os}, job=spec.name, framework="tensorflow")
    job = jobs.submit(spec, payload, KubernetesBackend())
    with pytest.raises(ValueError, match=r"\[rank 1\] bad shard on tf-k8s-fail-worker-0"):
        job.result(timeout=150)
    assert job.status() == "Failed"
    assert KubernetesBackend().stop(spec.name)
