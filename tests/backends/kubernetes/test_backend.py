"""The Kubernetes backend over HTTP with the real client, against the API emulator."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.base import BackendError
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.template import PayloadTooLarge
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import Collector
from tests.conftest import submit_now
from tests.crd_schema import validate_manifest
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.waiting import wait_for

CELL = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        x = torch.randn(8, 4)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        report(step=step, loss=loss)
    print("cost $HOME `date`", dist.get_rank())
    {"world": dist.get_world_size(), "rank": dist.get_rank()}
    """
)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """An emulated cluster; the default kubeconfig points at it."""
    with Emulator(
        env={"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}
    ) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


#: What planning may ask a cluster (which Kubeflow API it serves); it never writes.
READS = {("get", "discovery")}


def k8s_spec(name: str, **kw: Any) -> JobSpec:
    return JobSpec(name, backend="kubernetes", **kw)


def resources(emulator: Emulator, name: str) -> dict[str, list[str]]:
    client = emulator.api_client()
    from kubernetes import client as k

    core, custom = k.CoreV1Api(client), k.CustomObjectsApi(client)
    out = {
        "jobs": [
            o["metadata"]["name"]
            for o in custom.list_namespaced_custom_object(
                "kubeflow.org", "v1", "default", "pytorchjobs"
            )["items"]
        ],
        "pods": [
            p.metadata.name
            for p in core.list_namespaced_pod(
                "default", label_selector=f"training.kubeflow.org/job-name={name}"
            ).items
        ],
        "configmaps": [c.metadata.name for c in core.list_namespaced_config_map("default").items],
    }
    client.close()
    return out


@pytest.mark.slow
def test_job_runs_end_to_end_and_stop_cleans_up(cluster: Emulator, tmp_path: Path) -> None:
    backend = KubernetesBackend()
    payload = build_payload(CELL, {"STEPS": 4}, job="k8s-e2e")
    job = jobs.submit(k8s_spec("k8s-e2e", nodes=2, nproc=1, timeout=240), payload, backend)
    assert job.result(timeout=240) == {"world": 2, "rank": 0}
    assert job.status() == "Succeeded"
    snap = job.monitor.snapshot()
    assert [r["state"] for r in snap["ranks"]] == ["Succeeded", "Succeeded"]
    hosts = {r["pod"] or r["host"] for r in snap["ranks"]}
    assert hosts == {"k8s-e2e-master-0", "k8s-e2e-worker-0"}
    metrics = job.metrics()
    assert [row["step"] for row in metrics if row["rank"] == 0] == [0, 1, 2, 3]
    # The cell's text travels in the payload only: no shell ever expanded it.
    assert "cost $HOME `date` 1" in backend.logs("k8s-e2e", rank=1)
    assert "[rank 0] cost $HOME `date` 0" in backend.logs("k8s-e2e")
    listed = {r.name: r for r in backend.list_jobs()}
    assert listed["k8s-e2e"].state == "Succeeded" and listed["k8s-e2e"].world_size == 2
    # A second kernel re-attaches and rebuilds the same result from the log streams.
    again = jobs.attach("k8s-e2e", KubernetesBackend())
    try:
        again.wait(60)
    except TimeoutError:
        seen = [(line.rank, line.text) for line in again.monitor.log_lines()]
        raise AssertionError(f"re-attach did not end: {again.monitor.snapshot()}\n{seen}") from None
    assert again.result(timeout=60) == {"world": 2, "rank": 0}
    assert len(again.metrics()) >= 4
    # On a loaded API server the re-attach sees the job end before its pods, and node 0's
    # log comes late: the result still arrives before the job reads Succeeded.
    cluster.slow_down(1.0, verbs=["watch"], resources=["pods"])
    cluster.slow_down(3.0, resources=["pods/log"], names="k8s-e2e-master-0")
    late = jobs.attach("k8s-e2e", KubernetesBackend())
    assert late.wait(60) == "Succeeded"
    assert late.monitor.result() is not None, late.monitor.snapshot()
    assert late.result(timeout=60) == {"world": 2, "rank": 0}
    cluster.clear_faults()
    # kubectl, an independent client, sees the job and its logs.
    kubeconfig = os.environ["KUBECONFIG"]
    got = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", "pytorchjobs"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 0 and "k8s-e2e" in got.stdout, got.stderr
    logs = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "logs", "k8s-e2e-master-0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "[rank 0] cost $HOME" in logs.stdout, logs.stderr
    # A taken name is a 409 with a clear message; nothing extra is left behind.
    with pytest.raises(BackendError, match=r"already exists .*409"):
        submit_now(backend, k8s_spec("k8s-e2e"), payload, Collector())
    assert backend.stop("k8s-e2e")
    wait_for(
        lambda: resources(cluster, "k8s-e2e") == {"jobs": [], "pods": [], "configmaps": []}, 60
    )
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)


@pytest.mark.slow
def test_stop_while_running_deletes_job_pods_and_payload(cluster: Emulator) -> None:
    cell = "import time\nfor i in range(600):\n    report(step=i, x=i)\n    time.sleep(0.1)"
    job = jobs.submit(
        k8s_spec("k8s-stop", nodes=2), build_payload(cell, {}, job="k8s-stop"), KubernetesBackend()
    )
    wait_for(lambda: len(job.metrics()) > 2, 120, job.logs)
    assert job.status() == "Running"
    assert job.stop(timeout=60) == "Stopped"
    wait_for(
        lambda: resources(cluster, "k8s-stop") == {"jobs": [], "pods": [], "configmaps": []}, 60
    )
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)
    stats = cluster.stats()
    assert stats.streams.peak <= 4, stats


def test_dry_run_yaml_validates_against_the_crd(cluster: Emulator) -> None:
    spec = k8s_spec("k8s-yaml", nodes=3, nproc=2, options=(("gpus", "2"), ("volume", "d:/data")))
    plan = KubernetesBackend().plan(spec, build_payload("1", {}, job="k8s-yaml"))
    import yaml

    docs = list(yaml.safe_load_all(str(plan)))
    assert [d["kind"] for d in docs] == ["Secret", "PyTorchJob"]
    validate_manifest(docs[1])
    assert set(cluster.stats().requests) <= READS  # nothing was created: discovery was asked


def test_payload_too_large_is_refused_before_anything_is_created(cluster: Emulator) -> None:
    payload = build_payload("len(BLOB)", {"BLOB": os.urandom(1_200_000)}, job="k8s-big")
    with pytest.raises(PayloadTooLarge, match=r"over the 1.0 MB .*Secret can hold.*--volume"):
        submit_now(KubernetesBackend(), k8s_spec("k8s-big"), payload, Collector())
    assert set(cluster.stats().requests) <= READS


def test_no_kubeconfig_says_how_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(BackendError, match=r"no Kubernetes configuration found.*KUBECONFIG"):
        submit_now(
            KubernetesBackend(),
            k8s_spec("k8s-nocfg"),
            build_payload("1", {}, job="k8s-nocfg"),
            Collector(),
        )


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ("deny", r"403 Forbidden.*docs/rbac\.yaml"),
        ("unauthorized", r"401 Unauthorized.*log in again"),
        ("remove_crds", r"Training Operator is not installed.*kubectl apply"),
    ],
)
def test_api_errors_name_the_fix(cluster: Emulator, fault: str, needle: str) -> None:
    getattr(cluster, fault)()
    with pytest.raises(BackendError, match=needle):
        submit_now(
            KubernetesBackend(),
            k8s_spec("k8s-err"),
            build_payload("1", {}, job="k8s-err"),
            Collector(),
        )
    cluster.clear_faults()
    assert resources(cluster, "k8s-err")["configmaps"] == []  # nothing left half-created


def test_unschedulable_and_image_pull_failures_explain_pending(cluster: Emulator) -> None:
    cluster.make_unschedulable("k8s-sched-*")
    sched = jobs.submit(
        k8s_spec("k8s-sched"), build_payload("1", {}, job="k8s-sched"), KubernetesBackend()
    )
    wait_for(lambda: "0/3 nodes are available" in sched.reason, 30)
    assert sched.status() == "Pending"
    cluster.set_pullable_images(["never-matches/*"])
    pull = jobs.submit(
        k8s_spec("k8s-pull"), build_payload("1", {}, job="k8s-pull"), KubernetesBackend()
    )
    wait_for(
        lambda: any(
            "ImagePullBackOff" in r["reason"] or "ErrImagePull" in r["reason"]
            for r in pull.monitor.snapshot()["ranks"]
        ),
        30,
    )
    for job in (sched, pull):
        assert job.stop(timeout=30) == "Stopped"
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)


@pytest.mark.slow
def test_killed_pod_restarts_and_the_job_still_succeeds(cluster: Emulator, tmp_path: Path) -> None:
    # The ranks train until the test says so: the kill cannot come after the end.
    cell = textwrap.dedent(
        """
        import os, time, torch.distributed as dist
        print("round", os.environ.get("DISTRAIN_ROUND"), flush=True)
        print("up", flush=True)
        i = 0
        while not os.path.exists(FINISH) and i < 3000:
            report(step=i, x=float(i))
            time.sleep(0.1)
            i += 1
        dist.barrier()
        "finished"
        """
    )
    finish = tmp_path / "finish"
    spec = k8s_spec("k8s-kill", nodes=2, max_restarts=3, options=(("elastic", "2:2"),))
    payload = build_payload(cell, {"FINISH": str(finish)}, job="k8s-kill")
    job = jobs.submit(spec, payload, KubernetesBackend())
    # every rank has reported, so each printed its first "up" before the kill (rank 0 alone
    # can report three steps before rank 1 reaches its cell's first line)
    wait_for(lambda: {row["rank"] for row in job.metrics()} == {0, 1}, 120, job.logs)

    def kill_worker() -> bool:  # its agent restarts and re-joins the rendezvous
        try:
            cluster.kill_pod("k8s-kill-worker-1")
        except ValueError:  # its container is not running (yet)
            return False
        return True

    wait_for(kill_worker, 60, job.logs)
    wait_for(lambda: job.monitor.restarts >= 1, 120, job.logs)

    def ups() -> int:  # the job's logs as any kernel or the server reads them
        logs = KubernetesBackend().logs("k8s-kill")
        return sum(line.endswith("] up") for line in logs.splitlines())

    # both ranks' first run, and again after the restart: the killed container's lines are
    # its previous run's log, read with the restarted one's. The restart waits for the killed
    # agent's rendezvous heartbeat to expire (15 s), then both ranks start afresh: 17-21 s
    # here with three busy loops beside it on two CPUs; a stall shows as the same timeout.
    wait_for(lambda: ups() == 4, 180, lambda: KubernetesBackend().logs("k8s-kill"))
    finish.touch()
    assert job.result(timeout=240) == "finished", job.logs()
    assert job.monitor.restarts >= 1
    # the new agent's workers start under restart count 0 again, in the rendezvous's round 1
    logs = KubernetesBackend().logs("k8s-kill")
    rounds = sorted(line for line in logs.splitlines() if "] round " in line)
    assert rounds == [f"[rank {r}] round {n}" for r in (0, 1) for n in (0, 1)], logs
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)


def test_invalid_object_422_lists_the_field_errors(cluster: Emulator) -> None:
    from kubernetes import client as k
    from kubernetes.client.exceptions import ApiException

    from jupyter_disttrain.backends.kubernetes.client import explain

    bad = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "k8s-bad"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": "one"}}},
    }
    api = cluster.api_client()
    with pytest.raises(ApiException) as info:
        k.CustomObjectsApi(api).create_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "pytorchjobs", bad
        )
    api.close()
    message = str(explain(info.value, kind="PyTorchJob", name="k8s-bad", namespace="default"))
    assert "422 Invalid" in message and "replicas" in message


def test_render_command_prints_valid_yaml(cluster: Emulator, tmp_path: Path) -> None:
    import sys

    import yaml

    script = tmp_path / "train.py"
    script.write_text("import torch\nprint('hi $USER')\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "render",
            "--nodes",
            "2",
            "--gpus",
            "1",
            "--nccl",
            "ib",
            "--name",
            "from-file",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["Secret", "PyTorchJob"]
    validate_manifest(docs[1])
    assert "hi $USER" not in out.stdout  # the script travels inside the pickled payload only


@pytest.mark.slow
def test_quickstart_cell_with_backend_kubernetes(cluster: Emulator) -> None:
    """The tutorial's training cell, plus --backend kubernetes, through the magic (PyTorchJob).

    2 nodes x 2: the notebook follows node 0's pod log only, and every step of every rank
    reaches it (node 1's ranks relayed through rank 0), with at most 4 API streams open.
    """
    kjob = run_quickstart("k8s-quickstart")
    assert kjob.plan.objects[1]["kind"] == "PyTorchJob"
    steps = {r: sorted(row["step"] for row in kjob.metrics() if row["rank"] == r) for r in range(4)}
    assert steps[0] and all(s == list(range(len(steps[0]))) for s in steps.values()), (
        steps,
        kjob.logs(),
    )
    assert sorted(kjob.monitor.metric_ranks("loss")) == [0, 1, 2, 3]
    stats = cluster.stats()
    assert stats.streams.peak <= 4, stats
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)


def run_quickstart(name: str) -> Any:
    """Run the quickstart notebook's training cell with --backend kubernetes; return its job.

    Checks the result, and that the dashboard draws every rank's loss curve.
    """
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_disttrain.widgets import Dashboard
    from tests.conftest import REPO

    nb = nbformat.read(REPO / "notebooks" / "01-quickstart.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    train = next(c for c in code if c.startswith("%%distrain"))
    first, _, body = train.partition("\n")
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_disttrain")
    shell.run_line_magic("distrain_config", "live=none")
    for cell in code[: code.index(train)]:
        if not cell.startswith("%"):
            shell.run_cell(cell)
    line = first.removeprefix("%%distrain").replace("-o job", "-o kjob") + " --backend kubernetes"
    try:
        result = shell.run_cell_magic("distrain", line + f" --name {name}", body)
    finally:
        shell.run_line_magic("distrain_config", "live=auto")
    assert result["ranks"] == 4 and result["accuracy"] > 0.7, result
    kjob = shell.user_ns["kjob"]
    assert kjob.backend.name == "kubernetes" and len(kjob.metrics()) > 10
    dashboard = Dashboard(kjob.monitor)
    try:
        curves = {t.name for t in dashboard.plot.figure.data}
        assert {"rank 0", "rank 1", "rank 2", "rank 3"} <= curves, (curves, kjob.logs())
    finally:
        dashboard.close()
    shell.run_line_magic("distrain_jobs", "")
    assert kjob.stop() in ("Succeeded", "Stopped")
    return kjob


@pytest.mark.slow
def test_a_failed_job_keeps_its_logs_and_ends_its_pods(cluster: Emulator) -> None:
    """Rank 1 raises while rank 0 would sleep on: the survivor ends, every log stays readable."""
    cell = textwrap.dedent(
        """
        import time, torch.distributed as dist
        print("rank", dist.get_rank(), "up", flush=True)
        report(step=0, up=1)
        if dist.get_rank() == 1:
            raise ValueError("bad shard on rank 1")
        time.sleep(300)
        """
    )
    spec = k8s_spec("k8s-fail", nodes=2, timeout=240)
    job = jobs.submit(spec, build_payload(cell, {}, job="k8s-fail"), KubernetesBackend())
    started = time.monotonic()
    assert job.wait(180) == "Failed", job.reason
    with pytest.raises(ValueError, match="bad shard on rank 1"):
        job.result()

    def survivors() -> list[str]:
        return [p for p in resources(cluster, "k8s-fail")["pods"]]

    wait_for(lambda: not survivors() and not cluster.processes(), 60)
    assert time.monotonic() - started < 150
    assert "k8s-fail" in resources(cluster, "k8s-fail")["jobs"]  # the record stays
    assert "k8s-fail-logs" in resources(cluster, "k8s-fail")["configmaps"]
    failing = job.logs(rank=1)
    assert "rank 1 up" in failing, failing
    assert {e["rank"] for e in job.errors()} == {1}, job.errors()
    assert "rank 0 up" in job.logs(rank=0)
    assert "[rank 0]" in job.logs() and "[rank 1]" in job.logs()


@pytest.mark.slow
def test_a_failing_ranks_error_is_read_from_its_pod_when_the_pod_watch_lags(
    cluster: Emulator,
) -> None:
    """The follower's pod watch answers 120 s late (an API server behind a large job's pod
    updates): no pod log is followed and no failing pod is seen, yet the job's end brings
    the failing rank's own error, read from its pod's log while the logs are kept."""
    cell = textwrap.dedent(
        """
        import time, torch.distributed as dist
        if dist.get_rank() == 1:
            raise ValueError("bad shard on rank 1")
        time.sleep(300)
        """
    )
    cluster.slow_down(120, verbs=["watch"], resources=["pods"])
    try:
        spec = k8s_spec("k8s-lag", nodes=2, timeout=240)
        job = jobs.submit(spec, build_payload(cell, {}, job="k8s-lag"), KubernetesBackend())
        assert job.wait(110) == "Failed", job.reason
        with pytest.raises(ValueError, match="bad shard on rank 1"):
            job.result()
        assert {e["rank"] for e in job.errors()} == {1}, job.errors()
    finally:
        cluster.clear_faults()


#: Jobs of the no-restarts test, and how many are submitted at once.
SIDE_BY_SIDE_JOBS, SUBMITTED_AT_ONCE = 6, 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_jobs_side_by_side_finish_with_no_pod_restarts(cluster: Emulator) -> None:
    """A worker that finished exits 0 (teardown cannot abort it), so no pod is run twice;
    also while other jobs' pods start, run and end beside it (12 pods in all)."""
    from kubernetes import client as k

    api = cluster.api_client()
    try:
        core = k.CoreV1Api(api)
        for wave in range(0, SIDE_BY_SIDE_JOBS, SUBMITTED_AT_ONCE):
            names = [f"k8s-side-{i}" for i in range(wave, wave + SUBMITTED_AT_ONCE)]
            submitted = [
                jobs.submit(
                    k8s_spec(name, nodes=2, timeout=240),
                    build_payload(CELL, {"STEPS": 2}, job=name),
                    KubernetesBackend(),
                )
                for name in names
            ]
            for name, job in zip(names, submitted, strict=True):
                assert job.wait(300) == "Succeeded", (name, job.reason, job.logs())
                assert job.result()["world"] == 2
                pods = core.list_namespaced_pod(
                    "default", label_selector=f"training.kubeflow.org/job-name={name}"
                ).items
                restarts = {
                    p.metadata.name: sum(c.restart_count for c in p.status.container_statuses or [])
                    for p in pods
                }
                assert restarts and not any(restarts.values()), (name, restarts, job.logs())
                assert job.monitor.restarts == 0, (name, job.logs())
                job.stop()
    finally:
        api.close()


@pytest.mark.slow
def test_a_hung_job_on_pods_names_the_rank_through_rank_zeros_log(cluster: Emulator) -> None:
    # Only rank 0's pod log is followed: rank 1's stacks reach the notebook through rank 0.
    cell = textwrap.dedent(
        """
        import time, torch, torch.distributed as dist
        t = torch.ones(1)
        dist.all_reduce(t)
        report(step=0, value=t.item())
        if dist.get_rank() != 1:
            dist.all_reduce(t)
        else:
            time.sleep(600)
        """
    )
    spec = k8s_spec("k8s-hang", nodes=2, nproc=1, hang_after=5)
    job = jobs.submit(spec, build_payload(cell, {}, job="k8s-hang"), KubernetesBackend())
    wait_for(lambda: (job.diagnosis() or "").startswith("Hang"), 120, job.logs)
    sentence = job.diagnosis() or ""
    assert "Rank 1 holds up the others" in sentence, sentence
    assert "rank 0 waits in all_reduce (cell line 6)" in sentence, sentence
    assert "rank 1 is in time.sleep (cell line 8)" in sentence, sentence
    # Asked on request: the annotation of node 0's pod reaches rank 0 through the kubelet.
    where = job.where(timeout=60)
    assert where.reason == "asked", where.text()
    assert [g.ranks for g in where.groups] == [(0,), (1,)] and not where.missing, where.text()
    assert job.stop(timeout=60) == "Stopped"
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)


@pytest.mark.slow
def test_every_ranks_resource_figures_and_rank_zeros_progress_reach_the_notebook(
    cluster: Emulator,
) -> None:
    # Rank 1 (node 1) burns CPU; its resources lines reach the notebook through rank 0's log.
    cell = textwrap.dedent(
        """
        import time, torch.distributed as dist
        for step in range(8):
            end = time.monotonic() + 0.5
            if dist.get_rank() == 1:
                while time.monotonic() < end:
                    pass
            else:
                time.sleep(0.5)
            report(step=step, total=8)
        dist.barrier()
        """
    )
    spec = k8s_spec(
        "k8s-res", nodes=2, nproc=1, timeout=240, env=(("DISTRAIN_RESOURCES_INTERVAL", "0.3"),)
    )
    job = jobs.submit(spec, build_payload(cell, {}, job="k8s-res"), KubernetesBackend())

    def busy_rank_stands_out() -> bool:
        rows = job.monitor.snapshot()["ranks"]
        cpu = [r["cpu_pct"] for r in rows]
        # relative: on a loaded machine the spinning rank gets only its share of a core, but
        # still several times what the sleeping one uses
        return cpu[0] is not None and cpu[1] is not None and cpu[1] > max(3 * cpu[0], cpu[0] + 5)

    wait_for(busy_rank_stands_out, 120, lambda: (job.monitor.snapshot()["ranks"], job.logs()))
    assert job.wait(240) == "Succeeded", job.logs()
    snap = job.monitor.snapshot()
    assert all(r["rss_bytes"] for r in snap["ranks"]), snap["ranks"]
    assert snap["progress"] is not None and snap["progress"]["step"] == 8, snap["progress"]
    assert "resources" not in job.logs()
    wait_for(lambda: not cluster.processes(), 15, cluster.processes)
