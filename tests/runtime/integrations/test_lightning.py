"""Lightning under autolog: a real 2x2 job whose module logs ``train_loss`` every step.

Autolog sends a rank's values at the steps Lightning's loggers get
(``log_every_n_steps``, 3 here), the first step, each epoch's last step and
otherwise the latest at most once a second: which other steps show depends
on the machine's pace, so the tests check those that must, and no step
beyond the run's.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.runtime.integrations import lightning as integration
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from tests.backends.kubernetes.test_backend_trainjob import trainer  # noqa: F401 (a fixture)
from tests.backends.local.test_backend import Collector
from tests.conftest import submit_now
from tests.optional import requires
from tests.runtime.integrations.jobs import run_cell, save_step_bounds, values

pytestmark = requires("lightning")

LIGHTNING_CELL = textwrap.dedent(
    """
    import os, torch
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    x = torch.randn(64, 8)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    saver = pl.callbacks.ModelCheckpoint(dirpath=OUT, every_n_train_steps=SAVE_EVERY,
                                         save_top_k=-1)
    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", strategy="ddp", devices=2,
                         num_nodes=2, enable_progress_bar=False, logger=False,
                         enable_model_summary=False, callbacks=[saver], log_every_n_steps=3)
    trainer.fit(Tiny(), loader)
    {"step": trainer.global_step, "callbacks": [type(c).__name__ for c in trainer.callbacks]}
    """
)

PREEMPTED_CELL = textwrap.dedent(
    """
    import os, time, torch
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Slow(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_rank == 0:  # when each step ended, for the test's bound
                with open(os.path.join(OUT, "steps.txt"), "a") as fh:
                    fh.write(f"{trainer.global_step} {time.time()}\\n")
            time.sleep(DELAY)

    torch.manual_seed(0)
    x = torch.randn(1024, 8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                         batch_size=4)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", strategy="ddp", devices=2,
                         enable_progress_bar=False, logger=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=OUT, log_every_n_steps=1,
                         callbacks=[Slow()])
    trainer.fit(Tiny(), loader)
    {"step": trainer.global_step, "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"])}
    """
)


def steps_shown(job: Any, rank: int, run: range, must: set[int]) -> dict[int, float]:
    """``rank``'s train_loss by step: every step of ``must`` there, none outside ``run``."""
    shown = values(job, rank, "train_loss")
    assert must <= set(shown) <= set(run), (rank, sorted(shown), job.logs())
    return shown


def test_the_factory_gives_no_callback_outside_a_worker() -> None:
    """Lightning's callbacks_factory entry points: nothing unless a worker attached autolog."""
    assert integration.lightning_callbacks() == []
    assert integration.pytorch_lightning_callbacks() == []


@pytest.mark.slow
def test_logged_values_progress_checkpoints_and_resume(home: Path, tmp_path: Path) -> None:
    """2x2, 64 samples / 4 ranks / batch 4 = 4 steps an epoch, 2 epochs: 8 steps.

    train_loss at step 1 (the first), 3 and 6 (``log_every_n_steps``), 4 and 8
    (the epochs' ends) on every rank, rank 0's the values its checkpoints hold.
    """
    service = JobService()
    ckpts = tmp_path / "ckpts"
    names = {"OUT": str(tmp_path / "out"), "EPOCHS": 2, "SAVE_EVERY": 4}
    argv = [
        "--nodes",
        "2",
        "--nproc",
        "2",
        "--name",
        "pl-autolog",
        "--timeout",
        "240",
        "--checkpoint-dir",
        str(ckpts),
    ]
    job = run_cell(service, argv, LIGHTNING_CELL, names)
    try:
        assert job.wait(240) == "Succeeded", job.logs()
    finally:
        job.stop()
    assert job.result()["step"] == 8 and "DistrainCallback" in job.result()["callbacks"]
    for rank in range(4):
        steps_shown(job, rank, range(1, 9), {1, 3, 4, 6, 8})
    epochs = values(job, 0, "epoch")
    assert epochs == {s: float((s - 1) // 4) for s in epochs}, epochs
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (8, 8), progress
    store = CheckpointStore(str(ckpts))
    assert [(i.step, i.layout) for i in store.list()] == [(4, "lightning"), (8, "lightning")]
    assert store.verify() == {4: "ok", 8: "ok"}
    losses = values(job, 0, "train_loss")
    for info in store.list():  # the epoch ends' values, sent exact
        assert info.metrics["train_loss"] == pytest.approx(losses[info.step], rel=1e-6), info
    # --resume latest hands the .ckpt to Trainer.fit: three epochs go on from step 8
    argv2 = [*argv[:5], "pl-resume", *argv[6:], "--resume", "latest"]
    again = run_cell(service, argv2, LIGHTNING_CELL, {**names, "EPOCHS": 3})
    try:
        assert again.wait(240) == "Succeeded", again.logs()
    finally:
        again.stop()
    assert again.result()["step"] == 12, again.logs()
    steps_shown(again, 0, range(9, 13), {9, 12})
    assert "resuming Trainer.fit from" in again.logs()


@pytest.mark.slow
@pytest.mark.usefixtures("trainer")
def test_a_trainjob_on_the_emulator_sends_every_ranks_values_through_the_relay(
    tmp_path: Path,
) -> None:
    """The same module as a 2x2 TrainJob: pods of two nodes, every rank's train_loss."""
    backend = KubernetesBackend()
    names = {"OUT": str(tmp_path / "out"), "EPOCHS": 1, "SAVE_EVERY": 100}
    payload = build_payload(LIGHTNING_CELL, names, job="tj-lightning")
    spec = JobSpec("tj-lightning", backend="kubernetes", nodes=2, nproc=2, timeout=240)
    plan = backend.plan(spec, payload)
    assert plan.objects[1]["kind"] == "TrainJob"
    job = jobs.default_service().run(plan)
    assert job.result(timeout=240)["step"] == 4, job.logs()
    for rank in range(4):
        steps_shown(job, rank, range(1, 5), {1, 3, 4})
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (4, 4), progress
    # each pod's launcher imported Lightning once, for both of its ranks
    assert "distrain launcher: imported lightning.pytorch ahead" in job.logs(), job.logs()
    assert backend.stop("tj-lightning")


@pytest.mark.slow
def test_sigterm_makes_every_rank_save_and_the_restart_loses_no_step(tmp_path: Path) -> None:
    """1x2, SIGTERM to rank 1 mid-run, --max-restarts 1: every rank agrees on a step end, the
    Trainer saves there, the restarted ``fit`` goes on from it; rank 0 sends 1..40 once each
    (``log_every_n_steps=1``: every step is one Lightning's loggers get)."""
    spec = JobSpec(
        "pl-preempt",
        nodes=1,
        nproc=2,
        max_restarts=1,
        timeout=240,
        checkpoint_dir=str(tmp_path / "ckpts"),
    )
    names = {"OUT": str(tmp_path / "out"), "STEPS": 40, "DELAY": 0.15}
    (tmp_path / "out").mkdir()
    sink = Collector()
    run = submit_now(
        LocalBackend(), spec, build_payload(PREEMPTED_CELL, names, job=spec.name), sink
    )
    deadline = time.monotonic() + 180
    while not any(e.rank == 0 and e.get("step") >= 8 for e in sink.kinds("metric")):
        assert time.monotonic() < deadline, [str(e.fields) for e in sink.events[-40:]]
        time.sleep(0.05)
    victim = next(int(e.get("pid")) for e in sink.kinds("hello") if e.rank == 1)
    killed_at = time.time()
    os.kill(victim, signal.SIGTERM)
    assert run.join(240)
    logs = "\n".join(str(e.fields) for e in sink.events[-60:])
    signalled_after, most = save_step_bounds(
        tmp_path / "out" / "steps.txt", killed_at, names["DELAY"]
    )
    assert sink.final().get("state") == "Succeeded", logs
    assert [e.get("attempt") for e in sink.kinds("restart")] == [1], logs
    saved = [int(e.get("step")) for e in sink.kinds("checkpoint")]
    assert len(saved) == 1 and signalled_after <= saved[0] <= most, (saved, logs)
    steps = [
        int(e.get("step"))
        for e in sink.kinds("metric")
        if e.rank == 0 and "train_loss" in e.get("values")
    ]
    # every step once: the first attempt stopped at its checkpoint, the second went on from it
    assert steps == list(range(1, 41)), (str(steps), logs)
    value = decode_result(sink.kinds("result")[0].fields)
    assert value == {"step": 40, "restart": 1}, logs
