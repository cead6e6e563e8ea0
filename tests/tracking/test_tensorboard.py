"""TensorBoard event files of a job, read back with TensorBoard's own event reader."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jupyter_disttrain import events as ev
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.tracking import tensorboard_dir
from jupyter_disttrain.tracking.tensorboard import TensorBoardSink, run_dir

CELL = """
import torch.distributed as dist
rank = dist.get_rank()
for step in range(6):
    report(step=step, loss=10.0 * rank + step, lr=0.5 ** rank)
rank
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(list(argv))


def scalars(directory: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(directory))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


@pytest.mark.slow
def test_every_ranks_metrics_read_back_with_tensorboards_reader(tmp_path: Path) -> None:
    service = JobService()
    spec = service.spec(
        parse("--nodes", "2", "--nproc", "1", "--name", "tb-ranks", "--tensorboard", str(tmp_path))
    )
    started = time.time()
    job = service.run(service.plan(spec, CELL))
    try:
        assert job.wait(240) == "Succeeded", job.logs()
    finally:
        job.stop()
    logs = job.logs()
    for rank in (0, 1):
        run = run_dir(tmp_path, "tb-ranks", rank)
        acc = EventAccumulator(str(run))
        acc.Reload()
        assert sorted(acc.Tags()["scalars"]) == ["loss", "lr"], (run, logs)
        loss = acc.Scalars("loss")
        assert [(e.step, e.value) for e in loss] == [(s, 10.0 * rank + s) for s in range(6)], logs
        assert [e.value for e in acc.Scalars("lr")] == [0.5**rank] * 6
        assert all(started - 1 <= e.wall_time <= time.time() for e in loss)
    assert sorted(p.name for p in (tmp_path / "tb-ranks").iterdir()) == ["rank-0", "rank-1"]


K8S_CELL = """
import torch.distributed as dist
for step in range(5):
    report(step=step, loss=dist.get_rank() + step / 10)
"""


@pytest.mark.slow
def test_a_kubernetes_jobs_ranks_in_the_default_place_each_step_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 nodes x 2 on the emulated cluster: node 1's ranks reach the notebook relayed by rank 0.
    from jupyter_disttrain import service as jobs
    from jupyter_disttrain.backends.kubernetes import KubernetesBackend
    from jupyter_disttrain.payload import build_payload
    from tests.k8s_emulator.emulator import Emulator
    from tests.k8s_emulator.podnet import pod_interface

    with Emulator(
        env={"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}
    ) as cluster:
        monkeypatch.setenv("KUBECONFIG", str(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
        spec = JobSpec("tb-k8s", nodes=2, nproc=2, backend="kubernetes", timeout=240)
        job = jobs.submit(spec, build_payload(K8S_CELL, {}, job="tb-k8s"), KubernetesBackend())
        try:
            assert job.wait(240) == "Succeeded", job.logs()
        finally:
            job.stop()
    for rank in range(4):
        got = scalars(run_dir(home / "tensorboard", "tb-k8s", rank), "loss")
        assert got == [(s, pytest.approx(rank + s / 10)) for s in range(5)], (rank, got)


def metric(rank: int, step: int, t: float, **values: float) -> ev.Event:
    return ev.Event("metric", rank, t, {"step": step, "values": values})


def test_a_relayed_copy_is_written_once_and_a_rerun_replaces_the_files(tmp_path: Path) -> None:
    fed: list[ev.Event] = []
    sink = TensorBoardSink(tmp_path, "again", fed.append)
    for event in (
        metric(0, 1, 10.0, loss=2.0),
        metric(1, 1, 10.5, loss=3.0),
        metric(1, 1, 10.5, loss=3.0),  # rank 0 relayed rank 1's line
        metric(0, 2, 11.0, loss=1.5, flag=True),
        ev.job_event("Succeeded"),
    ):
        sink.on_event(event)
    assert sink.close(10) and not fed
    assert scalars(run_dir(tmp_path, "again", 0), "loss") == [(1, 2.0), (2, 1.5)]
    assert scalars(run_dir(tmp_path, "again", 1), "loss") == [(1, 3.0)]
    sink = TensorBoardSink(tmp_path, "again", fed.append)  # a new job of the same name
    sink.on_event(metric(0, 5, 20.0, loss=0.25))
    sink.on_event(ev.job_event("Failed"))
    assert sink.close(10)
    assert scalars(run_dir(tmp_path, "again", 0), "loss") == [(5, 0.25)]
    assert not list(run_dir(tmp_path, "again", 1).iterdir())


def test_a_restarted_rank_replaces_its_later_steps_as_tensorboard_reads_them(
    tmp_path: Path,
) -> None:
    sink = TensorBoardSink(tmp_path, "restarted", [].append)
    for t, step in enumerate([0, 1, 2, 3, 4, 5, 3, 4]):  # restarted from step 2's checkpoint
        sink.on_event(metric(0, step, 100.0 + t, loss=float(t)))
    sink.on_event(ev.job_event("Succeeded"))
    assert sink.close(10)
    got = scalars(run_dir(tmp_path, "restarted", 0), "loss")
    assert got == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 6.0), (4, 7.0)], got


def test_where_event_files_go(home: Path, tmp_path: Path) -> None:
    assert tensorboard_dir(JobSpec("a")) == home / "tensorboard" / "a"
    assert tensorboard_dir(JobSpec("a", tensorboard=str(tmp_path))) == tmp_path / "a"
    assert tensorboard_dir(JobSpec("a", tensorboard="off")) is None


def test_an_unwritable_directory_is_one_warning_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    fed: list[ev.Event] = []
    sink = TensorBoardSink(blocker, "j", fed.append)
    for step in range(3):
        sink.on_event(metric(0, step, 1.0 + step, loss=1.0))
    sink.on_event(ev.job_event("Succeeded"))
    assert sink.close(10)
    assert len(fed) == 1 and fed[0].kind == "log" and fed[0].rank is None, fed
    text = fed[0].get("text")
    assert text.startswith(f"warning: TensorBoard files in {blocker / 'j'}: "), text
    assert text.endswith("the job goes on without it"), text
