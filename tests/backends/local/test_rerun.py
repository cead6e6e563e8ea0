"""Running a job name again keeps the earlier run's checkpoints, where --resume finds them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.checkpoints.jobs import store_for
from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import Collector, job_logs, run_job

pytestmark = pytest.mark.slow

TRAIN = textwrap.dedent(
    """
    import torch
    state = load_checkpoint() or {"step": -1, "w": torch.zeros(1)}
    start = state["step"] + 1
    print(f"scale {SCALE}")
    for step in range(start, start + 4):
        state = {"step": step, "w": state["w"] + SCALE}
        report(step=step, w=float(state["w"]))
        if every(2, step):
            save_checkpoint(state, step)
    {"start": start, "w": float(state["w"])}
    """
)


def result(sink: Collector) -> dict[str, float]:
    value = decode_result(sink.kinds("result")[-1].fields)
    assert isinstance(value, dict)
    return value


def test_a_rerun_keeps_the_first_runs_checkpoints_and_resume_restores_them(home: Path) -> None:
    backend = LocalBackend()
    spec = JobSpec("rerun-keep", nodes=1, nproc=2, timeout=120)
    first, run1 = run_job(spec, TRAIN, {"SCALE": 1.0}, backend=backend)
    assert first.final().get("state") == "Succeeded", job_logs(run1)
    first_dir = Path(run1.plan.job_dir)
    first_ckpt = str(first_dir / "checkpoints")
    assert first_dir == home / "jobs" / "rerun-keep"
    assert [c.step for c in CheckpointStore(first_ckpt).list()] == [2]
    assert result(first) == {"start": 0, "w": 4.0}

    second, run2 = run_job(spec, TRAIN, {"SCALE": 10.0}, backend=backend)  # the same name
    assert second.final().get("state") == "Succeeded", job_logs(run2)
    second_dir = Path(run2.plan.job_dir)
    assert second_dir == home / "jobs" / "rerun-keep.2"
    first_store = CheckpointStore(first_ckpt)
    assert [c.step for c in first_store.list()] == [2] and first_store.verify() == {2: "ok"}
    assert float(first_store.load(2)["w"]) == 3.0  # the first run's, not the second's 30.0
    assert [c.step for c in CheckpointStore(str(second_dir / "checkpoints")).list()] == [2]

    # The name means the latest run; the earlier one is listed, read and browsed as NAME.1.
    assert jobdir.job_dir("rerun-keep") == second_dir
    assert jobdir.job_dir("rerun-keep.1") == first_dir
    listed = {r.name: r for r in backend.list_jobs() if r.name.startswith("rerun-keep")}
    assert set(listed) == {"rerun-keep", "rerun-keep.1"}, listed
    assert backend.checkpoint_dir(listed["rerun-keep.1"]) == first_ckpt
    assert store_for("rerun-keep.1", {})[0].uri == first_ckpt  # %distrain_checkpoints NAME.1
    assert store_for("rerun-keep", {})[0].uri == str(second_dir / "checkpoints")
    assert "scale 1.0" in backend.logs("rerun-keep.1", rank=0)
    assert "scale 10.0" in backend.logs("rerun-keep", rank=0)
    replayed = Collector()
    _, replay = backend.attach("rerun-keep.1", replayed)
    assert replay.join(30) and replayed.final().get("state") == "Succeeded"
    assert [e.get("step") for e in replayed.kinds("checkpoint")] == [2]

    # --resume the first run's checkpoints in a new job: its step is restored.
    resumed_spec = JobSpec(
        "rerun-resume", nodes=1, nproc=2, timeout=120, checkpoint_dir=first_ckpt, resume="latest"
    )
    third, run3 = run_job(resumed_spec, TRAIN, {"SCALE": 1.0}, backend=backend)
    assert third.final().get("state") == "Succeeded", job_logs(run3)
    assert result(third) == {"start": 3, "w": 7.0}, job_logs(run3)


def test_a_rerun_of_a_run_without_checkpoints_replaces_it(home: Path) -> None:
    backend = LocalBackend()
    spec = JobSpec("rerun-plain", nodes=1, nproc=1, timeout=120)
    for _ in range(2):
        sink, run = run_job(spec, "1", backend=backend)
        assert sink.final().get("state") == "Succeeded", job_logs(run)
        assert Path(run.plan.job_dir) == home / "jobs" / "rerun-plain"
    assert [r.name for r in backend.list_jobs() if r.name.startswith("rerun-plain")] == [
        "rerun-plain"
    ]
