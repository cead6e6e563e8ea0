"""Kubeflow-native progress: a ``%%distrain`` TrainJob writes ``status.trainerStatus`` through
the Trainer's status endpoint (the emulator with its ``TrainJobStatus`` gate on)."""

from __future__ import annotations

import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from kubernetes import client, watch

from jupyter_disttrain import cli
from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.server.manager import JobManager
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface

pytestmark = pytest.mark.slow
TRAINER, V1ALPHA1 = "trainer.kubeflow.org", "v1alpha1"
CELL = textwrap.dedent(
    """
    import time
    for step in range(STEPS):
        report(step=step, total=STEPS, loss=1.0 / (step + 1))
        time.sleep(0.3)
    "trained"
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """Trainer v2 with its status server; rank 0 may post every 0.2 s here."""
    env = {"GLOO_SOCKET_IFNAME": pod_interface(), "DISTRAIN_TRAINER_STATUS_EVERY": "0.2"}
    home = tmp_path_factory.mktemp("kube")
    with Emulator(env=env, apis=("trainer",), trainer_status=True) as emulator:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(home / "kubeconfig")))
            yield emulator


def follow(emu: Emulator, name: str, seen: list[dict[str, Any]], stop: threading.Event) -> None:
    """Every ``trainerStatus`` of TrainJob ``name`` as a watch delivers it."""
    api = emu.api_client()
    custom = client.CustomObjectsApi(api)
    stream = watch.Watch()
    try:
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            TRAINER,
            V1ALPHA1,
            "default",
            "trainjobs",
            field_selector=f"metadata.name={name}",
            timeout_seconds=120,
        ):
            status = (event["object"].get("status") or {}).get("trainerStatus")
            if status and status not in seen:
                seen.append(status)
            if stop.is_set():
                break
    finally:
        stream.stop()
        api.close()


@pytest.fixture(scope="module")
def progress_job(cluster: Emulator) -> tuple[Any, list[dict[str, Any]]]:
    """The ``%%distrain`` TrainJob ``tj-progress`` run to its end, and every
    ``trainerStatus`` a watch saw of it meanwhile."""
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    follower = threading.Thread(
        target=follow, args=(cluster, "tj-progress", seen, stop), daemon=True
    )
    follower.start()
    try:
        payload = build_payload(CELL, {"STEPS": 12}, job="tj-progress")
        spec = JobSpec("tj-progress", backend="kubernetes", nodes=2, nproc=1, timeout=240)
        job = jobs.default_service().run(KubernetesBackend().plan(spec, payload))
        assert job.result(timeout=240) == "trained", job.logs()
    finally:
        stop.set()
    return job, seen


def test_a_distrain_trainjob_writes_its_progress_into_trainer_status(
    cluster: Emulator, progress_job: tuple[Any, list[dict[str, Any]]]
) -> None:
    job, seen = progress_job
    # the object as `kubectl get trainjob tj-progress -o yaml` shows it
    with cluster.api_client() as api:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
            TRAINER, V1ALPHA1, "default", "trainjobs", "tj-progress"
        )
    final = obj["status"]["trainerStatus"]
    assert final["progressPercentage"] == 100 and final["estimatedRemainingSeconds"] == 0
    metrics = {m["name"]: m["value"] for m in final["metrics"]}
    assert metrics == {"step": "11", "loss": "0.0833333"}, final
    assert final["lastUpdatedTime"].endswith("Z")
    moving = [s["progressPercentage"] for s in seen if s.get("progressPercentage", 100) < 100]
    assert len(set(moving)) >= 2 and moving == sorted(moving), seen
    assert any(s.get("estimatedRemainingSeconds", 0) > 0 for s in seen), seen
    codes = cluster.trainer_status.posts("tj-progress")  # type: ignore[union-attr]
    assert codes and set(codes) == {200}, codes
    assert "trainerStatus" not in job.logs()  # no warning: every post was taken


def test_a_session_on_trainjob_writes_each_cells_progress(cluster: Emulator) -> None:
    service = jobs.JobService()
    spec = JobSpec(
        "ks-progress",
        backend="kubernetes",
        nodes=1,
        nproc=1,
        options=(("kubeflow_api", "trainjob"),),
    )
    session = service.start_session(spec)
    try:
        session.run("for i in range(4):\n    report(step=i, total=4, loss=0.5)")

        def reported() -> dict[str, Any]:
            with cluster.api_client() as api:
                obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
                    TRAINER, V1ALPHA1, "default", "trainjobs", "ks-progress"
                )
            return dict((obj.get("status") or {}).get("trainerStatus") or {})

        deadline = time.monotonic() + 30
        while reported().get("progressPercentage") != 100:
            assert time.monotonic() < deadline, reported()
            time.sleep(0.1)
        assert {"name": "loss", "value": "0.5"} in reported()["metrics"]
    finally:
        service.stop_session("ks-progress")


# --- a TrainJob of the namespace that this tool did not start ---------------------------------

MANIFEST = Path(__file__).resolve().parents[2] / "data" / "kubeflow_custom_trainer.yaml"
FOREIGN = "sdk-custom-trainer"


@pytest.fixture(scope="module")
def foreign(cluster: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The Kubeflow SDK-style TrainJob created with ``kubectl create -f``, attached from its
    start; yields the attached Job once the TrainJob is over."""
    config = cluster.write_kubeconfig(tmp_path_factory.mktemp("kubectl") / "config")
    create = ["kubectl", f"--kubeconfig={config}", "create", "--validate=false", "-f"]
    done = subprocess.run([*create, str(MANIFEST)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job = jobs.attach(FOREIGN, KubernetesBackend())
    assert job.wait(180) == "Succeeded", job.logs()
    yield job


def test_a_foreign_trainjob_is_listed_with_its_progress(
    foreign: Any, progress_job: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Listed beside this tool's own TrainJob (``progress_job``), told apart from it."""
    assert cli.main(["jobs", "--all"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["NAME", "KIND", "STATE", "PROGRESS"]
    row = next(line.split() for line in table if line.startswith(FOREIGN))
    assert row[1:4] == ["TrainJob", "Succeeded", "100%"] and row[5] == "2" and row[6] == "-"
    mine = next(line.split() for line in table if line.startswith("tj-progress"))
    assert mine[3] == "100%" and mine[-1] == "jupyter-disttrain"
    assert cli.main(["jobs"]) == 0  # without --all: only this tool's jobs
    assert FOREIGN not in capsys.readouterr().out


def test_a_foreign_trainjob_attaches_with_logs_and_a_progress_curve(
    foreign: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = foreign.logs()
    assert "node 0: step 6/6 loss=0.3333" in logs and "node 1: done" in logs, logs
    curve = [(row["step"], row["loss"]) for row in foreign.metrics() if row["rank"] == 0]
    assert len(curve) >= 3 and curve[-1] == (6, pytest.approx(0.3333)), curve
    assert [s for s, _ in curve] == sorted(s for s, _ in curve)
    assert cli.main(["where", FOREIGN, "--backend", "kubernetes"]) == 1
    assert "where is not available for sdk-custom-trainer" in capsys.readouterr().err
    snap = foreign.monitor.snapshot()
    assert snap["progress"] is not None and snap["progress"]["step"] == 100, snap["progress"]


def test_the_sidebar_opens_a_foreign_trainjob_with_its_logs_and_metrics(foreign: Any) -> None:
    manager = JobManager(backends=lambda: [KubernetesBackend()])
    try:
        row = next(j for j in manager.namespace()["jobs"] if j["name"] == FOREIGN)
        assert (row["workload"], row["progress"], row["foreign"]) == ("TrainJob", 100, True)
        detail = manager.job("kubernetes", FOREIGN)  # over: shown from its object
        assert detail["state"] == "Succeeded" and detail["metrics"]["loss"] == pytest.approx(0.3333)
        assert detail["progress"] is not None and detail["progress"]["fraction"] == 1.0
        text = manager.logs("kubernetes", FOREIGN, None, 50)["text"]
        assert "node 0: step 6/6 loss=0.3333" in text and "node 1: done" in text, text
    finally:
        manager.close()


def test_the_magics_list_attach_and_ask_before_stopping(
    foreign: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_disttrain")
    shell.run_line_magic("distrain_config", "backend=kubernetes")
    try:
        shell.run_line_magic("distrain_jobs", "--all")
        row = next(
            line.split()
            for line in capsys.readouterr().out.splitlines()
            if line.startswith(FOREIGN)
        )
        assert row[1:4] == ["TrainJob", "Succeeded", "100%"]
        job = shell.run_line_magic("distrain_attach", FOREIGN)
        assert job.wait(60) == "Succeeded" and "node 1: done" in job.logs()
        assert any(r["loss"] == pytest.approx(0.3333) for r in job.metrics())
        shell.run_line_magic("distrain_stop", FOREIGN)
        assert "not by jupyter-disttrain" in capsys.readouterr().out
        assert FOREIGN in {r.name for r in KubernetesBackend().list_namespace()}
    finally:
        shell.run_line_magic("distrain_config", "backend=local")


def test_stopping_a_foreign_trainjob_needs_rbac_then_a_confirmation(
    cluster: Emulator, foreign: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.deny(verbs=["delete"], resources=["trainjobs"])
    try:
        assert cli.main(["stop", FOREIGN, "--backend", "kubernetes"]) == 1
        assert "read-only here: your Kubernetes RBAC does not allow" in capsys.readouterr().err
        assert (
            cli.main(["stop", FOREIGN, "--backend", "kubernetes", "--yes"]) == 1
        )  # RBAC decides, not the flag
    finally:
        cluster.clear_faults()
    assert cli.main(["stop", FOREIGN, "--backend", "kubernetes"]) == 1
    assert "not by jupyter-disttrain" in capsys.readouterr().err
    assert FOREIGN in {r.name for r in KubernetesBackend().list_namespace()}
    assert cli.main(["stop", FOREIGN, "--backend", "kubernetes", "--yes"]) == 0
    assert f"{FOREIGN}: stopped" in capsys.readouterr().out
