"""JobManager with the Kubernetes backend, over HTTP against the API emulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.server.manager import JobManager
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.waiting import wait_for_value

from .jobdirs import write_job

CELL = (
    "import time\nfor i in range(600):\n    report(step=i, loss=1.0 / (i + 1))\n    time.sleep(0.1)"
)


@pytest.fixture
def cluster(job_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    with Emulator(
        env={"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}
    ) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


@pytest.mark.slow
def test_kubernetes_jobs_are_listed_followed_and_stopped(
    cluster: Emulator, tmp_path: Path, job_home: Path
) -> None:
    write_job("local-one")
    submitter = KubernetesBackend()
    submitter.notebook = str(tmp_path / "nb" / "k8s.ipynb")
    spec = JobSpec(name="k8s-side", nodes=2, nproc=1, backend="kubernetes", timeout=240)
    job = jobs.submit(spec, build_payload(CELL, {}, job="k8s-side"), submitter)
    wait_for_value(lambda: job.monitor.snapshot()["step"] or 0, lambda step: step >= 1, 120)
    kernels_streams = cluster.stats().streams.current  # the submitting kernel's follower
    # the configured backends (a kubeconfig exists); no listing cache, to see faults at once
    manager = JobManager(root_dir=str(tmp_path), cache_seconds={})
    try:
        listing = manager.list_jobs()
        assert [b["name"] for b in listing["backends"]] == ["local", "kubernetes"]
        assert {j["id"] for j in listing["jobs"]} == {"local/local-one", "kubernetes/k8s-side"}
        found = wait_for_value(
            lambda: manager.job("kubernetes", "k8s-side"),
            lambda j: j["state"] == "Running" and (j["step"] or 0) >= 2,
            120,
        )
        assert found["notebook"] == "nb/k8s.ipynb" and found["world_size"] == 2
        assert found["detail"]["followed"]  # shown from the kernel's record of the job
        # ... which the server reads instead of following the job itself: no stream of its own
        assert cluster.stats().streams.current == kernels_streams, cluster.stats()
        assert list(job_home.glob("views/kubernetes/*/default/k8s-side/view.json"))
        # a follower detached (as the server's own is once a record appears) ends its log
        # stream at the next line, not when the container ends, and its watches at once,
        # not at their next event or when the API server ends them (a minute)
        _, extra = submitter.attach("k8s-side", lambda event: None)
        wait_for_value(lambda: cluster.stats().log_follows.current, lambda n: n == 2, 60)
        wait_for_value(lambda: cluster.stats().streams.current, lambda n: n > kernels_streams, 60)
        extra.detach()
        wait_for_value(lambda: cluster.stats().log_follows.current, lambda n: n == 1, 10)
        wait_for_value(lambda: cluster.stats().streams.current, lambda n: n == kernels_streams, 5)
        assert {r["state"] for r in found["detail"]["ranks"]} == {"Running"}
        logs = manager.logs("kubernetes", "k8s-side", rank=None, tail=5)
        assert logs["ranks"] == [0, 1] and logs["message"] in ("", "no output yet")

        cluster.unauthorized(count=1)  # the next request answers 401
        broken = manager.list_jobs()
        assert [j["id"] for j in broken["jobs"]] == ["local/local-one"]
        assert "401" in broken["backends"][1]["error"]

        assert manager.stop("kubernetes", "k8s-side")["stopped"]
        wait_for_value(lambda: manager.list_jobs()["jobs"], lambda js: len(js) == 1, 120)
        assert job.wait(60) in ("Stopped", "Failed")
        wait_for_value(lambda: cluster.processes(), lambda procs: not procs, 30)
    finally:
        manager.close()
        if not job.done:
            job.stop()


#: Rank 1 raises; rank 0 would sleep on (the operator then fails the job).
FAILING = (
    "import time, torch.distributed as dist\n"
    "if dist.get_rank() == 1:\n    raise ValueError('bad shard on rank 1')\n"
    "time.sleep(300)"
)


@pytest.mark.slow
def test_a_failed_kubernetes_job_is_listed_with_its_failing_ranks_error(
    cluster: Emulator, tmp_path: Path
) -> None:
    """The first listing that shows the job Failed names rank 1's error, not the operator's
    condition message: that listing is what the sidebar's failure notification says."""
    spec = JobSpec(name="k8s-fails", nodes=2, nproc=1, backend="kubernetes", timeout=240)
    job = jobs.submit(spec, build_payload(FAILING, {}, job="k8s-fails"), KubernetesBackend())
    manager = JobManager(root_dir=str(tmp_path), cache_seconds={})
    try:

        def row() -> dict[str, Any]:
            return next(j for j in manager.list_jobs()["jobs"] if j["name"] == "k8s-fails")

        failed = wait_for_value(row, lambda j: j["state"] == "Failed", 120)
        said = "rank 1: ValueError: bad shard on rank 1; 1 rank stopped as a consequence"
        assert failed["reason"] == said, (
            failed,
            job.logs(),
        )
        assert failed["cause_rank"] == 1, failed
        again = row()  # read once: the next listing shows the same without reading again
        assert again["reason"] == failed["reason"], again
    finally:
        manager.close()
        if not job.done:
            job.stop()
