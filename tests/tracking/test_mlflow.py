"""A job as an MLflow run, against a real tracking server on 127.0.0.1."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import format_text
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.textview import format_event
from jupyter_disttrain.tracking.mlflow import MlflowSink, metric_key, params
from tests.tracking.mlflow_server import MlflowServer, free_port, mlflow_server

__all__ = ["mlflow_server"]

CELL = """
import torch, torch.distributed as dist
rank = dist.get_rank()
for step in range(5):
    report(step=step, loss=10.0 * rank + step, acc=0.1 * step)
    if step == 3:
        save_checkpoint({"w": torch.full((4,), float(step))}, step)
if rank == FAIL_RANK:
    raise ValueError("rank 1 gives up")
rank
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(list(argv))


def run_job(
    name: str, *flags: str, fail_rank: int = -1, seen: list[ev.Event] | None = None
) -> tuple[str, str, Any]:
    service = JobService()
    spec = service.spec(parse("--nodes", "1", "--nproc", "2", "--name", name, *flags))
    listeners = [seen.append] if seen is not None else []
    job = service.run(service.plan(spec, CELL, {"FAIL_RANK": fail_rank}), listeners)
    try:
        state = job.wait(240)
    finally:
        job.stop()
    return state, job.logs(), job


def the_run(server: MlflowServer, name: str) -> Any:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=server.uri)
    runs = client.search_runs(["0"], filter_string=f"tags.`disttrain.job` = '{name}'")
    assert len(runs) == 1, (runs, server.output())
    return runs[0]


@pytest.mark.slow
def test_a_job_is_a_run_with_params_every_ranks_metrics_checkpoints_and_status(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    state, logs, job = run_job(
        "mlf-ok",
        "--mlflow",
        mlflow_server.uri,
        "--checkpoint-dir",
        str(ckpt),
        "--env",
        "TOKEN=secret",
    )
    assert state == "Succeeded", logs
    assert not job.monitor.snapshot()["warnings"], logs
    run = the_run(mlflow_server, "mlf-ok")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    assert run.info.status == "FINISHED" and run.info.run_name == "mlf-ok"
    got = run.data.params
    assert got == params(job.spec), got
    assert got["nproc"] == "2" and got["world_size"] == "2" and got["env"] == "TOKEN", got
    assert "secret" not in str(got)
    run_id = run.info.run_id
    for rank in (0, 1):
        history = client.get_metric_history(run_id, metric_key("loss", rank))
        points = sorted((m.step, m.value) for m in history)
        assert points == [(s, 10.0 * rank + s) for s in range(5)], (points, logs)
        acc = sorted(
            (m.step, m.value)
            for m in client.get_metric_history(run_id, f"acc/rank{rank}" if rank else "acc")
        )
        assert [v for _, v in acc] == pytest.approx([0.1 * s for s in range(5)])
    assert set(run.data.metrics) == {"loss", "acc", "loss/rank1", "acc/rank1"}
    tags = run.data.tags
    uri = tags["disttrain.checkpoint.step-3"]
    assert uri.startswith(str(ckpt)), tags
    assert tags["disttrain.state"] == "Succeeded" and tags["disttrain.backend"] == "local"
    artifacts = [a.path for a in client.list_artifacts(run_id, "checkpoints/step-3")]
    assert artifacts == [f"checkpoints/step-3/{Path(uri).name}"], (artifacts, uri)
    local = client.download_artifacts(run_id, artifacts[0], str(tmp_path / "back"))
    assert Path(local).read_bytes() == Path(uri).read_bytes()


@pytest.mark.slow
def test_a_failed_job_is_a_failed_run(mlflow_server: MlflowServer) -> None:
    state, logs, _ = run_job("mlf-fail", "--mlflow", mlflow_server.uri, fail_rank=1)
    assert state == "Failed", logs
    run = the_run(mlflow_server, "mlf-fail")
    assert run.info.status == "FAILED", logs
    assert "rank 1" in run.data.tags.get("disttrain.reason", ""), run.data.tags


@pytest.mark.slow
def test_a_server_that_is_down_is_one_warning_and_the_job_runs_on() -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    seen: list[ev.Event] = []
    state, logs, job = run_job("mlf-down", "--mlflow", uri, seen=seen)
    assert state == "Succeeded", logs
    snap = job.monitor.snapshot()
    warnings = [w for w in snap["warnings"] if "MLflow" in w]
    assert len(warnings) == 1, snap["warnings"]
    assert warnings[0].startswith(f"MLflow at {uri}: cannot reach the tracking server ("), warnings
    assert warnings[0].endswith("; the job goes on without it"), warnings
    assert f"warning: {warnings[0]}" in format_text(snap)
    printed = [line for e in seen if (line := format_event(e)) and "MLflow" in line]
    assert printed == [f"warning: {warnings[0]}"], printed  # the command line's output
    assert job.result() == 0


def test_metric_names_and_params_as_mlflow_takes_them() -> None:
    assert [metric_key("loss", 0), metric_key("loss", 3)] == ["loss", "loss/rank3"]
    assert metric_key("acc@1", 1) == "acc_1/rank1"
    options = (("image", "img:1"), ("volume", "a:/x"), ("volume", "b:/y"))
    spec = JobSpec(
        "p", nodes=2, nproc=4, env=(("A", "1"), ("B", "2")), max_restarts=1, options=options
    )
    got = params(spec)
    assert got["world_size"] == "8" and got["env"] == "A,B" and got["max_restarts"] == "1"
    assert got["image"] == "img:1" and got["volume"] == "a:/x,b:/y"
    assert "timeout" not in got and "resume" not in got  # unset options are left out


def test_a_sink_cancelled_before_any_event_makes_no_run_and_says_nothing() -> None:
    fed: list[ev.Event] = []
    sink = MlflowSink(f"http://127.0.0.1:{free_port()}", JobSpec("never"), fed.append)
    sink.cancel(10)
    assert sink.finished and sink.run_id is None and not fed
