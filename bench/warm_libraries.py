"""Warm libraries benchmark: a Lightning cell's 2x2 job with the library imported ahead or not.

Each round runs in a new process with a launcher of its own (a new Jupyter
runtime directory), already warm with torch before the first job: two
consecutive 2x2 jobs whose cell imports ``lightning.pytorch`` and reports one
step, timed from submit to the end of the job, (off) with ``--env
DISTRAIN_WARM=`` (every worker imports Lightning itself) and (on) as the
product runs them (a warm child of the launcher imports it once, for the first
job; the second finds it imported). The two modes alternate round by round, so both
see the same machine load. ``python bench/warm_libraries.py [--rounds 5]
[--write]`` prints the medians (``--write`` rewrites the "Warm libraries"
section of BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from results import machine, publish  # noqa: E402

CELL = "import lightning.pytorch\nreport(step=0, ok=1)\n"


def one_round(mode: str) -> dict[str, float]:
    """In this process: a warm launcher of its own, then two jobs; their seconds."""
    from jupyter_disttrain import service as jobs
    from jupyter_disttrain.backends.local import LocalBackend
    from jupyter_disttrain.backends.local.launcher import shared_launcher
    from jupyter_disttrain.payload import build_payload
    from jupyter_disttrain.spec import JobSpec

    shared_launcher().wait_ready()
    env = (("DISTRAIN_WARM", ""),) if mode == "off" else ()
    seconds: dict[str, float] = {}
    for job in ("first", "second"):
        name = f"warm-{mode}-{job}"
        spec = JobSpec(name, nodes=2, nproc=2, timeout=300, env=env)
        started = time.monotonic()
        run = jobs.submit(spec, build_payload(CELL, {}, job=name), LocalBackend())
        state = run.wait(300)
        seconds[job] = time.monotonic() - started
        if state != "Succeeded":
            raise SystemExit(f"{name} ended {state}: {run.logs()}")
    return seconds


def measure(mode: str) -> dict[str, float]:
    """One round in a new process with its own runtime directory and job home."""
    with tempfile.TemporaryDirectory(prefix="rt-", dir="/tmp") as runtime:
        env = {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": runtime,
            "DISTRAIN_HOME": str(Path(runtime) / "home"),
            "DISTRAIN_LINGER": "0",
        }
        done = subprocess.run(
            [sys.executable, __file__, "--one", mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="rewrite BENCHMARKS.md's section")
    parser.add_argument("--one", choices=("off", "on"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_round(args.one)))
        return 0
    load = os.getloadavg()[0]
    rows: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            rows[mode].append(measure(mode))
    lines = [
        "| Lightning 2x2 job, submit to end | first job | second job |",
        "|---|---|---|",
    ]
    label = {
        "off": "each worker imports Lightning",
        "on": "a warm child of the launcher imports it ahead",
    }
    for mode in ("off", "on"):
        first = statistics.median(r["first"] for r in rows[mode])
        second = statistics.median(r["second"] for r in rows[mode])
        lines.append(f"| {label[mode]} | {first:.2f} s | {second:.2f} s |")
    intro = (
        f"`python bench/warm_libraries.py` on {machine()}; median of {args.rounds} rounds, "
        f"modes alternating; load average {load:.2f} at the start. Each round has a launcher "
        "of its own, warm with torch before the first job."
    )
    publish("\n".join(lines), "Warm libraries" if args.write else None, intro)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
