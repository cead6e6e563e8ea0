"""Autolog benchmark: what the Lightning and Hugging Face integrations cost a training step.

The same 1x2 job (local backend, gloo on CPU) runs with autolog on (the
default), with ``--no-autolog``, and (Lightning) with autolog sending every
step's values at once, taking turns, several rounds in one run: a Hugging
Face Trainer on a tiny BERT (``logging_steps=10``) and a Lightning module
that calls ``self.log`` every step. The cell itself times its steps after a
warm-up (a callback of its own, in every mode), so launch time does not
count. With autolog on, every step also carries the step-end vote on a
SIGTERM (one all-reduce about once a second), and Lightning's values go out
at its ``log_every_n_steps`` (50), at its epoch ends and else at most once a
second (:class:`~jupyter_disttrain.runtime.integrations.common.StepLines`).

On a shared, loaded machine the spread between runs of one mode exceeds
the difference between the modes, so the section also gives autolog's own
CPU time per step, measured inside rank 0 of the same autolog-on jobs: its
callback's per-step hooks (Lightning's batch end; the Trainer's step end and
log), the thread's CPU time around each call, over the whole run.

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
#: Autolog's modes: on (the default), off (``--no-autolog``), and on with every step's
#: values sent (how Lightning's values went out before they were bounded).
MODES = ("on", "off", "every step")

TIMER = textwrap.dedent(
    """
    import time

    if EVERY_STEP:  # each step's values out at once, as autolog sent Lightning's before
        import jupyter_disttrain.runtime.integrations.common as common
        common.LATEST_EVERY = 0.0

    def time_autolog(callbacks, hooks, spent):
        # Wrap autolog's callback hooks: spent[0] CPU seconds of this thread in them (a
        # collective's wait for the other rank is none), spent[1] calls of hooks[0].
        for callback in callbacks:
            if type(callback).__name__ != "DistrainCallback":
                continue
            for hook in hooks:
                def timed(*args, _inner=getattr(callback, hook), _first=hook == hooks[0], **kw):
                    started = time.thread_time()
                    out = _inner(*args, **kw)
                    spent[0] += time.thread_time() - started
                    spent[1] += _first
                    return out
                setattr(callback, hook, timed)
    """
)

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
    trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                      train_dataset=Data(), callbacks=[Clock()])
    spent = [0.0, 0]
    time_autolog(trainer.callback_handler.callbacks, ["on_step_end", "on_log"], spent)
    trainer.train()
    {"rate": (STEPS - WARMUP) / (Clock.marks[STEPS] - Clock.marks[WARMUP]),
     "autolog_s": spent[0] / spent[1] if spent[1] else None}
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
    spent = [0.0, 0]
    time_autolog(trainer.callbacks, ["on_train_batch_end"], spent)
    trainer.fit(Tiny(), loader)
    {"rate": (STEPS - WARMUP) / (Clock.marks[STEPS] - Clock.marks[WARMUP]),
     "autolog_s": spent[0] / spent[1] if spent[1] else None}
    """
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(argv)


def run_job(service: JobService, cell: str, steps: int, mode: str, name: str) -> dict[str, Any]:
    """One 1x2 job: rank 0's steps/s after the warm-up, autolog's seconds a step, metric rows."""
    on = mode != "off"
    argv = ["--nodes", "1", "--nproc", "2", "--name", name, "--timeout", "600"]
    if not on:
        argv.append("--no-autolog")
    with tempfile.TemporaryDirectory() as out:
        names: dict[str, Any] = {
            "OUT": out,
            "STEPS": steps,
            "WARMUP": WARMUP,
            "EVERY_STEP": mode == "every step",
        }
        job = service.run(service.plan(service.spec(parse(argv)), TIMER + cell, names))
        try:
            if job.wait(600) != "Succeeded":
                raise RuntimeError(f"{name} failed:\n{job.logs()}")
            rows = len(job.metrics())
            if (rows > 0) != on:
                raise RuntimeError(f"{name}: {rows} metric rows with autolog {mode}")
            result: dict[str, Any] = job.result()
            if (result["autolog_s"] is not None) != on:
                raise RuntimeError(f"{name}: autolog's callback timed {result} with autolog {mode}")
            return {"rows": rows, **result}
        finally:
            job.stop()


def run_all(rounds: int, steps: int) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every loop in every mode, ``rounds`` times, the modes' order turning each round."""
    service = JobService()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for i in range(rounds):
        for lib, cell in (("Hugging Face Trainer", HF), ("Lightning", LIGHTNING)):
            modes = MODES if lib == "Lightning" else MODES[:2]
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
                short = {"on": "on", "off": "off", "every step": "all"}[mode]
                name = f"bench-al-{'hf' if cell is HF else 'pl'}-{short}-{i}"
                out = run_job(service, cell, steps, mode, name)
                runs.setdefault((lib, mode), []).append(out)
                print(f"{name}: {out}", flush=True)
    return runs


def row(lib: str, mode: str, runs: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """One line of the table: ``lib`` in ``mode`` against ``--no-autolog``."""
    mine, off = runs[(lib, mode)], [r["rate"] for r in runs[(lib, "off")]]
    rate, base = statistics.median(r["rate"] for r in mine), statistics.median(off)
    each = " ".join(f"{r['rate']:.0f}" for r in mine) + " / " + " ".join(f"{r:.0f}" for r in off)
    spent = statistics.median(r["autolog_s"] for r in mine)
    rows = statistics.median(r["rows"] for r in mine)
    what = lib if mode == "on" else f"{lib}, every step's values sent"
    return (
        f"| {what} | {rate:.1f} | {base:.1f} | {100 * (base - rate) / base:+.1f} % | {each} "
        f"| {rows:.0f} | {spent * 1e6:.0f} µs | {100 * spent * base:.1f} % |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    os.environ.setdefault("DISTRAIN_HOME", tempfile.mkdtemp(prefix="distrain-bench-autolog-"))
    load_before = os.getloadavg()
    runs = run_all(args.rounds, args.steps)
    load_after = os.getloadavg()
    lines = [
        f"Machine: {machine_name()}; load average (1 min) {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (the benchmark's own jobs included).",
        f"Each figure: the median of {args.rounds} 1x2 jobs (local backend, gloo on CPU), "
        f"rank 0's steps/s over steps {WARMUP}-{args.steps}, autolog's modes taking turns "
        "in the same run (`python bench/autolog.py`).",
        "",
        "| loop | steps/s autolog on | steps/s `--no-autolog` | overhead | runs (on / off) "
        "| metric rows a job (2 ranks) | autolog's own CPU time a step "
        "| of a `--no-autolog` step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lib, mode in (
        ("Hugging Face Trainer", "on"),
        ("Lightning", "on"),
        ("Lightning", "every step"),
    ):
        lines.append(row(lib, mode, runs))
    lines += [
        "",
        "The last two columns are autolog's own CPU time, measured inside rank 0 of the "
        "autolog-on jobs (the median of their means): its callback's per-step hooks, the "
        "thread's CPU time around each call (Lightning's batch end: reading the step's "
        "logged values, progress, the vote on a SIGTERM, which is one all-reduce about "
        "once a second; the Trainer's step end, and its log every 10 steps). Lightning's "
        "module logs at every step; autolog sends a rank's values at Lightning's "
        "`log_every_n_steps` (50 here), at an epoch's last step and otherwise its latest "
        "at most once a second, so a job's metric rows stay few (the column before). The "
        "last row sends every step's values at once (`LATEST_EVERY = 0`), as autolog did "
        "before: a signed line written per step by every rank, then read and verified by "
        "the job's follower on the same two cores.",
    ]
    body = "\n".join(lines)
    print(body)
    write_section(ROOT / "BENCHMARKS.md", "Autolog", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
