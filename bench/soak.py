"""Soak: many consecutive local jobs from one process leave nothing behind and leak nothing.

Jobs alternate 1x2 and 2x2; every third raises on one rank, every fifth is
stopped once its ranks reported. Before and after, the process's resident
memory, open file descriptors and threads are read; at the end no process
of any job may be left. The first jobs warm the launcher and the imports,
so growth is measured from the end of the warm-up.

``python bench/soak.py [--jobs 50]`` prints the figures and rewrites the
"Soak" section of ``BENCHMARKS.md``; ``tests/test_soak.py`` runs a short one.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from jupyter_disttrain.backends.local import jobdir  # noqa: E402
from jupyter_disttrain.payload import build_payload  # noqa: E402
from jupyter_disttrain.service import JobService  # noqa: E402
from jupyter_disttrain.spec import JobSpec  # noqa: E402

CELL = """
import torch, torch.distributed as dist
t = torch.ones(1)
for step in range(3):
    dist.all_reduce(t)
    report(step=step, value=float(t))
if FAIL and dist.get_rank() == dist.get_world_size() - 1:
    raise RuntimeError("planned failure")
if STOP:
    import time
    time.sleep(120)
float(t)
"""


@dataclass
class Sample:
    """What the process holds after a job."""

    job: int
    rss: int
    fds: int
    threads: int


@dataclass
class SoakResult:
    """Every job's outcome and the resource samples."""

    states: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def growth(self, warmup: int) -> tuple[int, int, int]:
        """RSS bytes, fds and threads at the end minus after ``warmup`` jobs."""
        base = self.samples[min(warmup, len(self.samples)) - 1]
        end = self.samples[-1]
        return end.rss - base.rss, end.fds - base.fds, end.threads - base.threads


def sample(job: int) -> Sample:
    """The current process's RSS, open fds and threads (after a collection)."""
    gc.collect()
    proc = psutil.Process()
    return Sample(job, proc.memory_info().rss, proc.num_fds(), threading.active_count())


def leftovers(names: list[str]) -> list[str]:
    """Processes of the given jobs (their process groups) still alive."""
    groups = set()
    for name in names:
        try:
            state = json.loads((jobdir.job_dir(name) / "state.json").read_text())
        except (OSError, ValueError):
            continue
        if state.get("pgid"):
            groups.add(int(state["pgid"]))
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) in groups:
                found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:100]}")
        except (psutil.Error, OSError):
            continue
    return found


def soak(jobs: int, prefix: str = "soak") -> SoakResult:
    """Run ``jobs`` jobs one after another (see the module docstring)."""
    service = JobService()
    result = SoakResult()
    names = []
    started = time.perf_counter()
    for i in range(jobs):
        fail, stop = i % 3 == 2, i % 5 == 4 and i % 3 != 2
        nodes = 1 if i % 2 == 0 else 2
        spec = JobSpec(f"{prefix}-{i}", nodes=nodes, nproc=2, timeout=180)
        names.append(spec.name)
        payload = build_payload(CELL, {"FAIL": fail, "STOP": stop}, job=spec.name)
        job = service.submit(spec, payload)
        if stop:
            deadline = time.monotonic() + 120
            while len(job.metrics()) < spec.world_size and time.monotonic() < deadline:
                time.sleep(0.1)
            job.stop()
        state = job.wait(240)
        expected = "Stopped" if stop else "Failed" if fail else "Succeeded"
        if state != expected:
            raise AssertionError(
                f"job {i}: {state} ({job.reason}), expected {expected}\n{job.logs(tail=20)}"
            )
        result.states.append(state)
        result.samples.append(sample(i))
    result.seconds = time.perf_counter() - started
    time.sleep(1.0)
    result.left = leftovers(names)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    result = soak(args.jobs)
    rss, fds, threads = result.growth(args.warmup)
    first, last = result.samples[args.warmup - 1], result.samples[-1]
    print(
        f"{args.jobs} jobs in {result.seconds:.0f} s: "
        f"{result.states.count('Succeeded')} succeeded, {result.states.count('Failed')} "
        f"failed, {result.states.count('Stopped')} stopped"
    )
    print(
        f"after job {args.warmup}: RSS {first.rss / 2**20:.1f} MiB, {first.fds} fds, "
        f"{first.threads} threads; at the end: RSS {last.rss / 2**20:.1f} MiB, "
        f"{last.fds} fds, {last.threads} threads; left: {len(result.left)}"
    )
    from results import write_section

    today = datetime.date.today().isoformat()
    body = "\n".join(
        [
            f"`python bench/soak.py --jobs {args.jobs}` on {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, {today}: consecutive local jobs from one process "
            "(1x2 and 2x2 alternately; every third fails on one rank, every fifth is stopped "
            "once its ranks reported), each waited for before the next.",
            "",
            "| jobs | succeeded / failed / stopped | wall time | RSS growth | fds growth "
            "| threads growth | processes left |",
            "|---|---|---|---|---|---|---|",
            f"| {args.jobs} | {result.states.count('Succeeded')} / {result.states.count('Failed')} "
            f"/ {result.states.count('Stopped')} | {result.seconds:.0f} s | "
            f"{rss / 2**20:+.1f} MiB (from {first.rss / 2**20:.1f}) | {fds:+d} (from {first.fds}) "
            f"| {threads:+d} (from {first.threads}) | {len(result.left)} |",
            "",
            f"Growth is measured from the end of job {args.warmup} (the warm launcher, imports "
            "and first allocations come before).",
        ]
    )
    write_section(ROOT / "BENCHMARKS.md", "Soak", body)
    return 0 if not result.left else 1


if __name__ == "__main__":
    sys.exit(main())
