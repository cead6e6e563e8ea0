"""Autolog benchmark: what the Lightning and Hugging Face integrations cost a training step.

The same 1x2 job (local backend, gloo on CPU) runs with autolog on (the
default) and with ``--no-autolog``, alternating, several rounds in one run:
a Hugging Face Trainer on a tiny BERT (``logging_steps=10``) and a Lightning
module that calls ``self.log`` every step. The cell itself times its steps
after a warm-up (a callback of its own, in both modes), so launch time does
not count. With autolog on, every step also carries the step-end vote on a
SIGTERM (one all-reduce) and Lightning's values go out as a metric line.

On a shared, loaded machine the spread between runs of one mode exceeds
the difference between the modes, so the section also gives autolog's own
work per step, timed in this process: the callbacks' step-end (and, every
10 steps, log) hooks called 20000 times with the values a step hands them,
their lines written to a null device; the vote's all-reduce (about once a
second) is not in it.

``python bench/autolog.py [--rounds 3] [--steps 300]`` prints the figures and
rewrites the "Autolog" section of ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from results import machine as machine_name  # noqa: E402
from results import write_section  # noqa: E402

from jupyter_disttrain.options import add_job_options  # noqa: E402
from jupyter_disttrain.service import JobService  # noqa: E402

WARMUP = 20

HF = textwrap.dedent(
    """
    import time, torch
    from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                              TrainerCallback, TrainingArguments)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    ids = torch.randint(0, 64, (4096, 8))

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return len(ids)
        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": ids[i, 0] % 2}

    class Clock(TrainerCallback):
        marks = {}
        def on_step_end(self, args, state, control, **kwargs):
            self.marks[state.global_step] = time.perf_counter()

    args = TrainingArguments(output_dir=OUT, max_steps=STEPS, logging_steps=10,
                             save_strategy="no", per_device_train_batch_size=4,
                             report_to="none", use_cpu=True, disable_tqdm=True)
    Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Data(),
            callbacks=[Clock()]).train()
    (STEPS - WARMUP) / (Clock.marks[STEPS] - Clock.marks[WARMUP])
    """
)

LIGHTNING = textwrap.dedent(
    """
    import time, torch
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(32, 1)
        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Clock(pl.Callback):
        marks = {}
        def on_train_batch_end(self, trainer, *args):
            self.marks[trainer.global_step] = time.perf_counter()

    x = torch.randn(8192, 32)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :1]),
                                         batch_size=8)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", strategy="ddp", devices=2,
                         enable_progress_bar=False, logger=False, enable_model_summary=False,
                         enable_checkpointing=False, callbacks=[Clock()])
    trainer.fit(Tiny(), loader)
    (STEPS - WARMUP) / (Clock.marks[STEPS] - Clock.marks[WARMUP])
    """
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(argv)


def steps_per_s(service: JobService, cell: str, steps: int, on: bool, name: str) -> float:
    """One 1x2 job: rank 0's steps/s after the warm-up."""
    argv = ["--nodes", "1", "--nproc", "2", "--name", name, "--timeout", "600"]
    if not on:
        argv.append("--no-autolog")
    with tempfile.TemporaryDirectory() as out:
        names: dict[str, Any] = {"OUT": out, "STEPS": steps, "WARMUP": WARMUP}
        job = service.run(service.plan(service.spec(parse(argv)), cell, names))
        try:
            if job.wait(600) != "Succeeded":
                raise RuntimeError(f"{name} failed:\n{job.logs()}")
            rows = len(job.metrics())
            if (rows > 0) != on:
                raise RuntimeError(f"{name}: {rows} metric rows with autolog {on}")
            return float(job.result())
        finally:
            job.stop()


def hook_seconds(calls: int = 20000) -> dict[str, float]:
    """Seconds of autolog's own work per step, by loop (see the module docstring)."""
    import contextlib
    from types import SimpleNamespace

    import lightning.pytorch as pl
    import torch
    from transformers.trainer_callback import TrainerCallback

    from jupyter_disttrain.runtime import report
    from jupyter_disttrain.runtime.integrations import hf, lightning

    out: dict[str, float] = {}
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        callback = hf._callback_class(TrainerCallback)()
        state = SimpleNamespace(global_step=0, max_steps=calls)
        logs = {"loss": 0.5, "grad_norm": 1.2, "learning_rate": 1e-4, "epoch": 0.1}
        started = time.perf_counter()
        for step in range(1, calls + 1):
            state.global_step = step
            callback.on_step_end(None, state, None)
            if step % 10 == 0:
                callback.on_log(None, state, None, logs=logs)
        out["Hugging Face Trainer"] = (time.perf_counter() - started) / calls
        lightning._classes["bench"] = lightning._callback_class(pl.Callback)
        module = lightning._classes["bench"]()
        connector = SimpleNamespace(metrics={"callback": {"train_loss": torch.tensor(0.5)}})
        trainer = SimpleNamespace(
            global_step=0, max_steps=calls, current_epoch=0, _logger_connector=connector
        )
        started = time.perf_counter()
        for step in range(1, calls + 1):
            trainer.global_step = step
            module.on_train_batch_end(trainer, None, None, None, step)
        out["Lightning"] = (time.perf_counter() - started) / calls
    report.flush_progress()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    os.environ.setdefault("DISTRAIN_HOME", tempfile.mkdtemp(prefix="distrain-bench-autolog-"))
    service = JobService()
    load_before = os.getloadavg()
    rates: dict[tuple[str, bool], list[float]] = {}
    for i in range(args.rounds):
        for lib, cell in (("Hugging Face Trainer", HF), ("Lightning", LIGHTNING)):
            for on in (True, False) if i % 2 == 0 else (False, True):
                name = f"bench-al-{'hf' if cell is HF else 'pl'}-{'on' if on else 'off'}-{i}"
                rate = steps_per_s(service, cell, args.steps, on, name)
                rates.setdefault((lib, on), []).append(rate)
                print(f"{name}: {rate:.1f} steps/s", flush=True)
    load_after = os.getloadavg()
    own = hook_seconds()
    lines = [
        f"Machine: {machine_name()}; load average (1 min) {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (the benchmark's own jobs included).",
        f"Each figure: the median of {args.rounds} 1x2 jobs (local backend, gloo on CPU), "
        f"rank 0's steps/s over steps {WARMUP}-{args.steps}, autolog on and off alternating "
        "in the same run (`python bench/autolog.py`).",
        "",
        "| loop | steps/s autolog on | steps/s `--no-autolog` | overhead | runs (on / off) "
        "| autolog's own work a step | of a `--no-autolog` step |",
        "|---|---|---|---|---|---|---|",
    ]
    for lib in ("Hugging Face Trainer", "Lightning"):
        on, off = rates[(lib, True)], rates[(lib, False)]
        m_on, m_off = statistics.median(on), statistics.median(off)
        each = " ".join(f"{r:.0f}" for r in on) + " / " + " ".join(f"{r:.0f}" for r in off)
        lines.append(
            f"| {lib} | {m_on:.1f} | {m_off:.1f} | {100 * (m_off - m_on) / m_off:+.1f} % | {each} "
            f"| {own[lib] * 1e6:.0f} µs | {100 * own[lib] * m_off:.1f} % |"
        )
    lines += [
        "",
        "The last two columns are autolog's own work, timed in one process: the Trainer "
        "callback's step end (and its log every 10 steps), Lightning's per-step metric line. "
        "The end-to-end overhead also holds what the extra lines cost to carry and read: a "
        "metric line every step from every rank, read by the job's follower on the same two "
        "cores. The vote on a SIGTERM adds one all-reduce about once a second.",
    ]
    body = "\n".join(lines)
    print(body)
    write_section(ROOT / "BENCHMARKS.md", "Autolog", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
