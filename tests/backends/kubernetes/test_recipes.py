"""--data and --prometheus on emulated clusters: staged files, progress, /metrics scrapes."""

from __future__ import annotations

import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k

from jupyter_disttrain import events as ev
from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.widgets.header import header_html
from tests.backends.local.test_backend import Collector
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.k8s_emulator.rewrite import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

ENV = {"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}


def start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Emulator:
    emulator = Emulator(env=ENV, **kw).start()
    monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
    return emulator


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """The Training Operator (v1), no Prometheus Operator."""
    emulator = start(tmp_path, monkeypatch)
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """Kubeflow Trainer v2 and the Prometheus Operator's ServiceMonitor."""
    emulator = start(tmp_path, monkeypatch, apis=("trainer",))
    emulator.serve_service_monitors()
    try:
        yield emulator
    finally:
        emulator.stop()


def bucket(s3: dict[str, str]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(
        endpoint_url=s3["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing"
    )
    if not fs.exists("recipes"):
        fs.mkdir("recipes")
    fs.pipe({"recipes/ds/a.txt": b"hello from s3", "recipes/ds/sub/big.bin": b"\1" * 3_000_000})


def pod_env(s3: dict[str, str], emulator: Emulator) -> tuple[tuple[str, str], ...]:
    # The cell finds the data through $DATA_DIR (/data: in the loopback fallback the emulator
    # rewrites mount paths in the environment); pods reach the object store on this host
    # through the emulator (a relay on the pod network).
    port = int(s3["FSSPEC_S3_ENDPOINT_URL"].rsplit(":", 1)[1])
    env = {**s3, "FSSPEC_S3_ENDPOINT_URL": f"http://{emulator.expose(port)}"}
    return (*env.items(), ("DATA_DIR", "/data"))


READ_CELL = textwrap.dedent(
    """
    import os
    root = os.environ["DATA_DIR"]
    text = open(os.path.join(root, "a.txt")).read()
    report(step=0, big=os.path.getsize(os.path.join(root, "sub", "big.bin")), chars=len(text))
    text
    """
)


def test_a_pytorchjob_reads_data_staged_from_s3_with_progress_in_the_dashboard(
    cluster: Emulator, s3: dict[str, str]
) -> None:
    bucket(s3)
    options = (("data", "s3://recipes/ds:/data"), ("prometheus", "true"))
    spec = JobSpec(
        "stage-ok",
        nodes=2,
        nproc=1,
        backend="kubernetes",
        timeout=240,
        options=options,
        env=pod_env(s3, cluster),
    )
    backend = KubernetesBackend()
    collector = Collector()
    run = backend.submit(
        backend.plan(spec, build_payload(READ_CELL, {}, job="stage-ok")), collector
    )
    logs = lambda: "\n".join(str(e.fields) for e in collector.events)  # noqa: E731
    assert run.join(240), logs()
    assert collector.final().get("state") == "Succeeded", logs()
    values = {e.rank: e.get("values") for e in collector.kinds("metric")}
    assert values == {r: {"big": 3_000_000.0, "chars": 13.0} for r in (0, 1)}, logs()
    staged = [e.staging() for e in collector.kinds("staging")]
    assert staged[-1]["state"] == "done" and staged[-1]["done"] == 3_000_013, logs()
    assert staged[-1]["host"] == "stage-ok-master-0"
    # What the dashboard showed while the init container copied: replay up to that moment.
    copying = next(
        i
        for i, e in enumerate(collector.events)
        if e.kind == "staging" and e.get("state") == "copying"
    )
    monitor = JobMonitor("stage-ok", "kubernetes", 2, 2, 1)
    monitor.feed_many(collector.events[: copying + 1])
    html = header_html(monitor.snapshot())
    line = html.split('class="distrain-staging">', 1)[-1].split("</div>", 1)[0]
    assert line.startswith("staging s3://recipes/ds -&gt; "), html  # then /data, made local here
    assert line.endswith(" on stage-ok-master-0: 0 B of 2.9 MB (0%), 0 of 2 files"), html
    monitor.feed_many(collector.events[copying + 1 :])
    snap = monitor.snapshot()
    assert 'class="distrain-staging"' not in header_html(snap)  # staged: no longer shown
    # No Prometheus Operator here: the Service is made and one warning says why not the monitor.
    warnings = [w for w in snap["warnings"] if "ServiceMonitor" in w]
    assert len(warnings) == 1 and "no ServiceMonitor CRD" in warnings[0], snap["warnings"]
    core = k.CoreV1Api(cluster.api_client())
    service = core.read_namespaced_service("stage-ok-metrics", "default")
    assert service.metadata.owner_references[0].kind == "PyTorchJob"
    backend.stop("stage-ok")


def test_a_failed_copy_fails_the_job_with_the_copiers_error(
    cluster: Emulator, s3: dict[str, str]
) -> None:
    bucket(s3)
    options = (("data", "s3://recipes/absent:/data"),)
    spec = JobSpec(
        "stage-bad",
        nodes=2,
        nproc=1,
        backend="kubernetes",
        timeout=240,
        options=options,
        env=pod_env(s3, cluster),
    )
    # node 0's copier log, followed, answers late: the failure must read as staging's from
    # the failed pod's own status (its termination message), whichever pod failed first
    cluster.slow_down(5.0, resources=["pods/log"], names="stage-bad-master-0")
    try:
        job = jobs.submit(spec, build_payload("1", {}, job="stage-bad"), KubernetesBackend())
        assert job.wait(120) == "Failed", job.logs()
        snap = job.monitor.snapshot()
    finally:
        cluster.clear_faults()
    assert snap["reason"] == "DataStagingFailed", (snap["message"], job.logs())
    assert "s3://recipes/absent: nothing there" in snap["message"], snap["message"]
    assert "--data staging failed on pod stage-bad-" in snap["message"]
    assert (snap["diagnosis"] or "").startswith("Data staging failed: s3://recipes/absent"), snap
    wait_for(lambda: not cluster.processes(), 30, cluster.processes)  # nothing keeps retrying


METRICS_CELL = textwrap.dedent(
    """
    import os, time
    import torch.distributed as dist
    rank = dist.get_rank()
    for step in range(3):
        report(step=step, loss=1.0 / (step + 1) + rank, **{"acc/top-1": 0.5})
    deadline = time.time() + 120
    while not os.path.exists(GO) and time.time() < deadline:
        time.sleep(0.1)
    rank
    """
)


def fetch_metrics(emulator: Emulator, job: str, port: int) -> tuple[str, str]:
    """Content-Type and body of rank 0's ``/metrics``, fetched as Prometheus does: from the
    pod network at the pod's address (on this host's loopback in the fallback)."""
    if emulator.podnet is None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return resp.headers["Content-Type"], resp.read().decode()
    core = k.CoreV1Api(emulator.api_client())
    selector = f"jobset.sigs.k8s.io/jobset-name={job},batch.kubernetes.io/job-completion-index=0"
    pods = core.list_namespaced_pod("default", label_selector=selector).items
    if not pods or not pods[0].status.pod_ip:
        raise OSError(f"no rank 0 pod of {job} with an address yet")
    with emulator.podnet.connect(None, pods[0].status.pod_ip, port, 5.0) as sock:
        sock.settimeout(5)
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).decode().partition("\r\n\r\n")
    if " 200 " not in head.split("\r\n", 1)[0]:
        raise OSError(head or "no answer")
    headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:])
    return headers["Content-Type"], body


def scrape(emulator: Emulator, job: str, port: int) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    content_type, text = fetch_metrics(emulator, job, port)
    assert content_type.startswith("text/plain; version=0.0.4")
    return {
        (sample.name, sample.labels.get("rank", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_trainjob_stages_data_and_rank_zero_serves_every_ranks_metrics(
    trainer: Emulator, s3: dict[str, str], tmp_path: Path
) -> None:
    bucket(s3)
    port, go = free_port(set()), tmp_path / "go"
    options = (("data", "s3://recipes/ds:/data"), ("prometheus", str(port)))
    spec = JobSpec(
        "tj-metrics",
        nodes=2,
        nproc=2,
        backend="kubernetes",
        timeout=240,
        options=options,
        env=pod_env(s3, trainer),
    )
    cell = 'assert open(os.environ["DATA_DIR"] + "/a.txt").read() == "hello from s3"\n'
    payload = build_payload("import os\n" + cell + METRICS_CELL, {"GO": str(go)}, job="tj-metrics")
    job = jobs.submit(spec, payload, KubernetesBackend())
    seen: dict[tuple[str, str], float] = {}

    def every_rank_scraped() -> bool:
        nonlocal seen
        try:
            seen = scrape(trainer, "tj-metrics", port)
        except OSError:
            return False
        return all(seen.get(("disttrain_step", str(r))) == 2 for r in range(4))

    try:
        wait_for(every_rank_scraped, 180, lambda: f"{seen}\n{job.logs()}")
    finally:
        go.touch()
    for rank in range(4):
        assert seen[("disttrain_loss", str(rank))] == pytest.approx(1 / 3 + rank)
        assert seen[("disttrain_acc_top_1", str(rank))] == 0.5
        assert seen[("disttrain_reports_total", str(rank))] == 3
    assert job.result(timeout=120) == 0, job.logs()
    custom = k.CustomObjectsApi(trainer.api_client())
    monitor: Any = custom.get_namespaced_custom_object(
        "monitoring.coreos.com", "v1", "default", "servicemonitors", "tj-metrics"
    )
    assert monitor["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    snap = job.monitor.snapshot()
    assert not [w for w in snap["warnings"] if "ServiceMonitor" in w], snap["warnings"]
    assert any(
        e.get("state") == "done"
        for e in [ev.Event("staging", None, 0, dict(r)) for r in snap["staging"]]
    )
    KubernetesBackend().stop("tj-metrics")
