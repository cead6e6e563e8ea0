"""Hugging Face Trainer under autolog: real 1x2 jobs with a tiny BERT built from its config."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from tests.backends.kubernetes.test_backend_trainjob import trainer  # noqa: F401 (a fixture)
from tests.backends.local.test_backend import Collector
from tests.conftest import submit_now
from tests.optional import requires
from tests.runtime.integrations.jobs import run_cell, save_step_bounds, values

pytestmark = requires("transformers")

HF_CELL = textwrap.dedent(
    """
    import os, time, torch
    from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                              TrainerCallback, TrainingArguments)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(config)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (256, 8), generator=gen)
    labels = (ids[:, 0] % 2).long()

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return len(ids)
        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": labels[i]}

    class Slow(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:  # when each step ended, for the tests' bounds
                os.makedirs(OUT, exist_ok=True)
                with open(os.path.join(OUT, "steps.txt"), "a") as fh:
                    fh.write(f"{state.global_step} {time.time()}\\n")
            time.sleep(DELAY)

    args = TrainingArguments(output_dir=OUT, max_steps=STEPS, logging_steps=LOG_EVERY,
                             save_steps=SAVE_EVERY, per_device_train_batch_size=4,
                             report_to="none", use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Slow()])
    out = trainer.train()
    {"step": trainer.state.global_step, "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
     "loss": out.training_loss}
    """
)


@pytest.mark.slow
def test_trainer_logs_checkpoints_and_resume_reach_the_job(home: Path, tmp_path: Path) -> None:
    """logging_steps=5, max_steps=20: loss at 5, 10, 15, 20; checkpoint-10/20 listed; resume."""
    service = JobService()
    ckpts, out = tmp_path / "ckpts", tmp_path / "out"
    names = {"OUT": str(out), "STEPS": 20, "LOG_EVERY": 5, "SAVE_EVERY": 10, "DELAY": 0.0}
    argv = [
        "--nodes",
        "1",
        "--nproc",
        "2",
        "--name",
        "hf-autolog",
        "--timeout",
        "240",
        "--checkpoint-dir",
        str(ckpts),
    ]
    job = run_cell(service, argv, HF_CELL, names)
    try:
        assert job.wait(240) == "Succeeded", job.logs()
    finally:
        job.stop()
    for rank in (0, 1):
        assert sorted(values(job, rank, "loss")) == [5, 10, 15, 20], (rank, job.metrics())
    assert sorted(values(job, 0, "learning_rate")) == [5, 10, 15, 20]
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (20, 20), progress
    store = CheckpointStore(str(ckpts))
    infos = store.list()
    assert [(i.step, i.layout) for i in infos] == [(10, "hf"), (20, "hf")], job.logs()
    assert infos[-1].metrics["loss"] == pytest.approx(values(job, 0, "loss")[20])
    assert store.verify() == {10: "ok", 20: "ok"}
    folder = Path(store.dir.payload_path(store._entry(20)))
    assert (folder / "trainer_state.json").is_file() and (folder / "model.safetensors").is_file()
    # --resume latest: the Trainer gets the folder and goes on from step 20 to 30
    names2 = {**names, "STEPS": 30}
    argv2 = [*argv[:5], "hf-resume", *argv[6:], "--resume", "latest"]
    again = run_cell(service, argv2, HF_CELL, names2)
    try:
        assert again.wait(240) == "Succeeded", again.logs()
    finally:
        again.stop()
    assert sorted(values(again, 0, "loss")) == [25, 30], (again.metrics(), again.logs())
    assert again.result()["step"] == 30
    assert "resuming the Trainer from" in again.logs()
    assert [i.step for i in store.list()] == [10, 20, 30]


@pytest.mark.slow
def test_no_autolog_leaves_the_metrics_empty(home: Path, tmp_path: Path) -> None:
    service = JobService()
    names = {
        "OUT": str(tmp_path / "out"),
        "STEPS": 4,
        "LOG_EVERY": 2,
        "SAVE_EVERY": 100,
        "DELAY": 0.0,
    }
    argv = ["--nodes", "1", "--nproc", "2", "--name", "hf-off", "--no-autolog"]
    job = run_cell(service, argv, HF_CELL, names)
    try:
        assert job.wait(240) == "Succeeded", job.logs()
    finally:
        job.stop()
    assert list(job.metrics()) == [], job.metrics()
    progress = job.monitor.snapshot()["progress"]
    assert progress is None or progress["total"] != 4, progress  # no Trainer max_steps sent
    assert job.result()["step"] == 4


@pytest.mark.slow
def test_sigterm_makes_the_trainer_save_and_the_restart_loses_no_step(tmp_path: Path) -> None:
    """1x2, SIGTERM to rank 1 mid-run, --max-restarts 1: a checkpoint at the next step, then
    the restarted Trainer goes on from it; rank 0 reports every step 1..40 exactly once."""
    spec = JobSpec(
        "hf-preempt",
        nodes=1,
        nproc=2,
        max_restarts=1,
        timeout=200,
        checkpoint_dir=str(tmp_path / "ckpts"),
    )
    names = {
        "OUT": str(tmp_path / "out"),
        "STEPS": 40,
        "LOG_EVERY": 1,
        "SAVE_EVERY": 1000,
        "DELAY": 0.15,
    }
    sink = Collector()
    run = submit_now(LocalBackend(), spec, build_payload(HF_CELL, names, job=spec.name), sink)
    deadline = time.monotonic() + 120
    while not any(e.rank == 0 and e.get("step") >= 8 for e in sink.kinds("metric")):
        assert time.monotonic() < deadline, sink.kinds("job")
        time.sleep(0.05)
    victim = next(int(e.get("pid")) for e in sink.kinds("hello") if e.rank == 1)
    killed_at = time.time()
    os.kill(victim, signal.SIGTERM)
    assert run.join(200)
    logs = "\n".join(str(e.fields) for e in sink.events[-40:])
    signalled_after, most = save_step_bounds(
        tmp_path / "out" / "steps.txt", killed_at, names["DELAY"]
    )
    assert sink.final().get("state") == "Succeeded", logs
    assert [e.get("attempt") for e in sink.kinds("restart")] == [1], logs
    saved = [int(e.get("step")) for e in sink.kinds("checkpoint")]
    assert signalled_after <= saved[0] <= most, (saved, logs)
    assert saved[1:] == [40], saved  # the Trainer's own save at the end
    steps = [
        int(e.get("step"))
        for e in sink.kinds("metric")
        if e.rank == 0 and "loss" in e.get("values")
    ]
    # every step once: the first attempt stopped at its checkpoint, the second went on from it
    assert steps == list(range(1, 41)), (str(steps), logs)
    value = decode_result(sink.kinds("result")[0].fields)
    assert value["step"] == 40 and value["restart"] == 1


@pytest.mark.slow
@pytest.mark.usefixtures("trainer")
def test_a_trainjob_on_the_emulator_sends_every_ranks_logs_through_the_relay(
    tmp_path: Path,
) -> None:
    """The Trainer as a 2x2 TrainJob: pods of two nodes, every rank's loss at 5 and 10."""
    backend = KubernetesBackend()
    names = {
        "OUT": str(tmp_path / "out"),
        "STEPS": 10,
        "LOG_EVERY": 5,
        "SAVE_EVERY": 1000,
        "DELAY": 0.0,
    }
    payload = build_payload(HF_CELL, names, job="tj-hf")
    spec = JobSpec("tj-hf", backend="kubernetes", nodes=2, nproc=2, timeout=240)
    plan = backend.plan(spec, payload)
    assert plan.objects[1]["kind"] == "TrainJob"
    job = jobs.default_service().run(plan)
    assert job.result(timeout=240)["step"] == 10, job.logs()
    for rank in range(4):
        assert sorted(values(job, rank, "loss")) == [5, 10], (rank, job.logs())
    assert sorted(values(job, 3, "learning_rate")) == [5, 10], job.logs()
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (10, 10), progress
    assert backend.stop("tj-hf")
