"""Checkpoint benchmark: listing a large directory, and the atomic save against a bare torch.save.

(a) ``CheckpointStore.list()`` over 10,000 checkpoints: with the manifest
    compacted (the normal case), with 500 records newer than the manifest,
    and with no manifest at all (every record read);
(b) ``save_checkpoint`` (temporary name, sha256, flush, fsync, rename,
    record, manifest) against ``torch.save`` of the same state to a path (which
    only reaches the page cache) and against ``torch.save`` + ``fsync`` (the
    durable baseline), for model-plus-optimizer states of several sizes; also
    without fsync and with ``background=True`` (the time the training loop waits).

``python bench/checkpoints.py [--reps 7]`` prints the figures and rewrites the
"Checkpoints" section of ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from results import write_section  # noqa: E402

from jupyter_disttrain.checkpoints.store import CheckpointStore  # noqa: E402
from jupyter_disttrain.runtime.checkpoint import api as ck  # noqa: E402
from jupyter_disttrain.runtime.checkpoint import format as fmt  # noqa: E402
from jupyter_disttrain.runtime.checkpoint.commit import ENV_FSYNC  # noqa: E402
from jupyter_disttrain.runtime.checkpoint.directory import CheckpointDir  # noqa: E402


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def make_listing(directory: Path, n: int) -> dict[str, fmt.Entry]:
    """``n`` committed checkpoints (tiny data files, full records) written directly."""
    (directory / fmt.ENTRIES_DIR).mkdir(parents=True)
    records = {}
    for step in range(n):
        token = secrets.token_hex(3)
        entry = fmt.make_entry(
            step=step,
            token=token,
            layout=fmt.FULL,
            time=1.7e9 + step,
            nbytes=16,
            sha256=secrets.token_hex(32),
            metrics={"loss": 1 / (step + 1), "accuracy": 0.5},
            world_size=16,
            versions={"python": "3.11.7", "torch": torch.__version__},
            job="bench-job",
            run="r",
            tensors=12,
            parameters=1_000_000,
        )
        (directory / entry["path"]).write_bytes(b"x" * 16)
        name = fmt.entry_name(step, token)
        (directory / fmt.ENTRIES_DIR / name).write_bytes(fmt.encode_entry(entry))
        records[name] = entry
    return records


def bench_list(n: int, reps: int) -> list[tuple[str, float]]:
    """Best-of-``reps`` seconds of a fresh store's ``list()`` in three manifest states."""
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-list-"))
    try:
        directory = work / "run"
        records = make_listing(directory, n)
        cdir = CheckpointDir(str(directory))
        out = []
        cdir.compact(records)
        out.append(
            (
                "manifest compacted",
                min(timed(lambda: CheckpointStore(str(directory)).list()) for _ in range(reps)),
            )
        )
        lagging = dict(list(records.items())[: n - 500])
        cdir.compact(lagging)
        out.append(
            (
                "500 records newer than the manifest",
                min(timed(lambda: CheckpointStore(str(directory)).list()) for _ in range(reps)),
            )
        )
        (directory / fmt.MANIFEST).unlink()
        out.append(
            (
                "no manifest (every record read)",
                min(timed(lambda: CheckpointStore(str(directory)).list()) for _ in range(reps)),
            )
        )
        assert len(CheckpointStore(str(directory)).list()) == n
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def model_state(megabytes: int) -> dict[str, object]:
    """A model state_dict plus an SGD-momentum optimizer state of about ``megabytes`` MB."""
    width = 1024
    layers = max(1, megabytes * 1024 * 1024 // (2 * width * width * 4))
    model = {f"layers.{i}.weight": torch.randn(width, width) for i in range(layers)}
    momentum = {i: {"momentum_buffer": torch.randn(width, width)} for i in range(layers)}
    optimizer = {
        "state": momentum,
        "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": list(range(layers))}],
    }
    return {"model": model, "optimizer": optimizer, "step": 0}


def bench_save(megabytes: int, reps: int, work: Path) -> dict[str, float]:
    """Median seconds per variant, reps interleaved so drift hits all alike."""
    state = model_state(megabytes)
    bare_dir = work / f"bare-{megabytes}"
    bare_dir.mkdir()
    times: dict[str, list[float]] = {
        k: [] for k in ("bare", "durable", "atomic", "nofsync", "bg_wait", "bg_total")
    }
    for rep in range(reps + 1):  # the first round warms up
        round_ = {}
        started = time.perf_counter()
        torch.save(state, bare_dir / "checkpoint.pt")  # overwritten, as a plain loop does
        round_["bare"] = time.perf_counter() - started
        started = time.perf_counter()
        with open(bare_dir / "durable.pt", "wb") as fh:  # the durable baseline
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        round_["durable"] = time.perf_counter() - started
        for key, fsync, background in (
            ("atomic", True, False),
            ("nofsync", False, False),
            ("bg_wait", True, True),
        ):
            os.environ[ck.ENV_DIR] = str(work / f"{key}-{megabytes}")
            os.environ[ENV_FSYNC] = "1" if fsync else "0"
            started = time.perf_counter()
            ck.save_checkpoint(state, rep, keep_last=1, background=background)
            round_[key] = time.perf_counter() - started
            ck.wait_for_saves()
            round_["bg_total"] = time.perf_counter() - started
        if rep:
            for key, value in round_.items():
                times[key].append(value)
    return {key: statistics.median(values) for key, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--sizes", default="8,64,256", help="state sizes in MB")
    parser.add_argument("--n", type=int, default=10_000, help="checkpoints to list")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    listing = bench_list(args.n, args.reps)
    for label, seconds in listing:
        print(f"list() of {args.n}: {label}: {seconds * 1000:.0f} ms")
    sizes = [int(s) for s in args.sizes.split(",")]
    saves = {}
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-save-"))
    devnull = open(os.devnull, "w")  # checkpoint protocol lines go there
    real_stdout, sys.stdout = sys.stdout, devnull
    try:
        for mb in sizes:
            saves[mb] = bench_save(mb, args.reps, work)
    finally:
        sys.stdout = real_stdout
        devnull.close()
        shutil.rmtree(work, ignore_errors=True)
    for mb, t in saves.items():
        print(
            f"{mb} MB: bare {t['bare']:.3f}s durable {t['durable']:.3f}s atomic "
            f"{t['atomic']:.3f}s ({t['atomic'] / t['durable']:.2f}x of durable, "
            f"{t['atomic'] / t['bare']:.2f}x of bare) no-fsync {t['nofsync'] / t['bare']:.2f}x "
            f"background wait {t['bg_wait'] / t['bare']:.2f}x"
        )
    write_section(ROOT / "BENCHMARKS.md", "Checkpoints", report(args, listing, saves))
    return 0


def report(
    args: argparse.Namespace, listing: list[tuple[str, float]], saves: dict[int, dict[str, float]]
) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"`python bench/checkpoints.py --reps {args.reps}` on {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, torch {torch.__version__}, {today}; local disk, one thread.",
        "",
        f"**`CheckpointStore.list()` over {args.n:,} checkpoints** (best of {args.reps}, a fresh "
        "store each time; target under 1 s):",
        "",
        "| manifest | list() |",
        "|---|---|",
        *[f"| {label} | {seconds * 1000:.0f} ms |" for label, seconds in listing],
        "",
        f"**Saving a model + optimizer state** (median of {args.reps}): "
        "`torch.save(state, path)` over the previous file (reaches the page cache only), "
        "`torch.save` + flush + `fsync` (the durable baseline), and "
        "`save_checkpoint(state, step, keep_last=1)` (temporary name, sha256 while "
        "writing, flush, fsync, rename, record, manifest, retention); the same without "
        "fsync (`DISTRAIN_CHECKPOINT_FSYNC=0`); and with `background=True`, where the "
        "loop waits only for a copy of the state. Target: within 1.15x of the durable "
        "baseline.",
        "",
        "| state | torch.save | torch.save + fsync | atomic save | vs durable | vs bare "
        "| no fsync vs bare | background: loop waits | background: durable after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mb, t in saves.items():
        bare, durable = t["bare"], t["durable"]
        lines.append(
            f"| {mb} MB | {bare:.3f} s | {durable:.3f} s | {t['atomic']:.3f} s | "
            f"{t['atomic'] / durable:.2f}x | {t['atomic'] / bare:.2f}x | "
            f"{t['nofsync'] / bare:.2f}x | {t['bg_wait']:.3f} s ({t['bg_wait'] / bare:.2f}x) | "
            f"{t['bg_total']:.3f} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
