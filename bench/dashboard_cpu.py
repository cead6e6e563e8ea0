"""What a running job's dashboard costs the browser, the kernel and the server, in CPU.

``python bench/dashboard_cpu.py [--rounds 2] [--write]`` serves JupyterLab on 127.0.0.1
and drives Debian's Chromium with the browser tests' harness (``bench/dashboard_cpu.mjs``
over ``tests/browser/lab.mjs``): a notebook runs a 2x2 local job that reports a step and
its loss every 50 ms, and once it has run a while the CPU seconds of Chromium's
processes, the kernel and the server are read over a window. Each round measures the
chart as it draws now (new points at most every ``widgets.plot.DRAW_EVERY`` seconds) and,
as the baseline in the same run, a chart that draws at every render of the dashboard (up
to ten a second, as before), one after the other, each once the machine is quiet
(1-minute load average below 1, waited for up to 3 minutes). Printed with the load;
``--write`` rewrites the "Dashboard: CPU while a job runs" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SECTION = "Dashboard: CPU while a job runs"
#: Each variant starts once the 1-minute load average is below QUIET_LOAD (at most SETTLE_S).
QUIET_LOAD, SETTLE_S = 1.0, 180.0
WARMUP_S = 6.0
WINDOW_S = 15.0
#: The chart's least seconds between two draws: None keeps the product's default.
VARIANTS = {"draws at every render (before)": 0.0, "new points at most twice a second": None}


def cells(draw_every: float | None) -> list[str]:
    """The notebook: the extension (and the chart's draw interval), then the job."""
    setup = "%load_ext jupyter_disttrain"
    if draw_every is not None:
        setup += (
            "\nimport jupyter_disttrain.widgets.plot as plot"
            f"\nplot.DRAW_EVERY = {draw_every}  # read by each chart made after this"
        )
    job = """%%distrain --nodes 2 --nproc 2 --name bench-dashboard-cpu
import time
import torch.distributed as dist
rank = dist.get_rank()
for step in range(600):
    report(step=step, total=600, loss=1.0 / (step + 1) + 0.01 * rank)
    time.sleep(0.05)"""
    return [setup, job]


def measure(draw_every: float | None) -> dict[str, Any]:
    """One variant: CPU seconds by kind of process over the window, and the chart's draws."""
    from launch import settle

    from tests.browser.conftest import serve_lab
    from tests.browser.harness import write_notebook

    settle(QUIET_LOAD, SETTLE_S)  # not under the load the previous variant left
    load = os.getloadavg()[0]
    node = shutil.which("node")
    assert node is not None, "node is needed (make browser-deps)"
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.contextmanager(serve_lab)(Path(tmp)) as lab,
    ):
        notebook = write_notebook(lab.root, "dashboard-cpu.ipynb", cells(draw_every))
        script = ROOT / "bench" / "dashboard_cpu.mjs"
        args = [node, str(script), lab.url, notebook, str(WARMUP_S), str(WINDOW_S)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"the harness printed no result:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(lines[-1])
    if "error" in result:
        raise SystemExit(f"the harness failed: {result['error']}\n{done.stderr[-3000:]}")
    if result["state"] != "Running":  # the window must lie inside the job's run
        raise SystemExit(f"the job was {result['state']} at the window's end, not Running")
    return {"load": load, "draws": result["draws"], "state": result["state"], **result["cpu"]}


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = [
        f"| chart | load at start (1 min) | chart draws in {WINDOW_S:g} s | Chromium | kernel "
        "| server | (CPU s in the window; share of one core) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        share = (r["chromium"] + r["kernel"] + r["server"]) / WINDOW_S
        lines.append(
            f"| {name} | {r['load']:.2f} | {r['draws']} | {r['chromium']:.2f} "
            f"| {r['kernel']:.2f} | {r['server']:.2f} | {share:.2f} of a core in all |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, Any]]] = []
    for _ in range(args.rounds):
        for name, draw_every in VARIANTS.items():
            rows.append((name, measure(draw_every)))
            print(json.dumps({"chart": name, **rows[-1][1]}), flush=True)
    from results import machine, publish

    intro = (
        f"`python bench/dashboard_cpu.py --rounds {args.rounds}`, {time.strftime('%Y-%m-%d')}, "
        f"{machine()}, JupyterLab and Debian's Chromium (headless) on the same machine. "
        + DESCRIPTION
    )
    publish(table(rows), SECTION if args.write else None, intro)
    return 0


DESCRIPTION = (
    "A notebook runs a 2x2 local job whose ranks report a step and a loss every 50 ms; "
    f"once its dashboard has run {WARMUP_S:g} s, the CPU seconds of every Chromium process, "
    f"the kernel and the Jupyter server are read from /proc over {WINDOW_S:g} s. The "
    "dashboard renders up to ten times a second in both rows; the first row's chart draws "
    "the new points at every render (as it did before), the second's at most every "
    "`widgets.plot.DRAW_EVERY` seconds (0.5). Each draw makes plotly lay out and paint the "
    "whole chart again."
)

if __name__ == "__main__":
    sys.exit(main())
