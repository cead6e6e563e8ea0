"""The dashboard of 64 to 1,024 nodes x 8 ranks in a real browser: what a redraw costs.

``python bench/scale_browser.py [--nodes 64,256,1024] [--write]`` serves JupyterLab on
127.0.0.1 and drives Debian's Chromium with the browser test's harness
(``tests/browser/scale.mjs``) over the browser test's notebook
(``tests/browser/test_scale_browser.py``) at each size: the kernel shows the
dashboard of a monitor of N x 8 ranks (a step every 8 s per rank, two ranks 1.8x
slower, one node never heard from), three ranks are opened in the picker, then
the kernel feeds reports for 25 s while the page times every chart redraw
(plotly's ``beforeplot`` to ``afterplot``). Printed with the machine's load;
``--write`` rewrites the "Scale: the dashboard in a browser" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SECTION = "Scale: the dashboard in a browser"


def measure(nodes: int, output: Path) -> dict[str, Any]:
    """One size's run: its redraw times (ms) and what the dashboard showed."""
    from tests.browser.conftest import serve_lab
    from tests.browser.harness import run_harness, write_notebook
    from tests.browser.test_scale_browser import FEED, picks, setup_cell

    load = os.getloadavg()[0]
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.contextmanager(serve_lab)(Path(tmp)) as lab,
    ):
        notebook = write_notebook(lab.root, "scale.ipynb", [setup_cell(nodes), FEED])
        result = run_harness("scale.mjs", lab, notebook, output / str(nodes), picks(nodes))
    redraws = [float(ms) for ms in result["redraws"]]
    return {
        "nodes": nodes,
        "ranks": nodes * 8,
        "load_start": load,
        "load_end": os.getloadavg()[0],
        "redraws": len(redraws),
        "median_ms": statistics.median(redraws),
        "p90_ms": statistics.quantiles(redraws, n=10)[8],  # as bench/scale.py's p99
        "max_ms": max(redraws),
        "traces": len(result["traces"]),
        "rows": len(result["rows"]),
        "picked": result["picked"],
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes x 8 | load at start / end (1 min) | chart redraws | redraw median / p90 / "
        "max ms | legend entries | rank table rows (and ranks opened) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['nodes']} ({r['ranks']} ranks) | {r['load_start']:.1f} / {r['load_end']:.1f} "
            f"| {r['redraws']} | {r['median_ms']:.1f} / {r['p90_ms']:.1f} / {r['max_ms']:.1f} "
            f"| {r['traces']} | {r['rows']} (+{len(r['picked'])}) |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="64,256,1024")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    output = ROOT / "test-output" / "bench-scale-browser"
    rows = []
    for nodes in [int(n) for n in args.nodes.split(",")]:
        rows.append(measure(nodes, output))
        print(json.dumps(rows[-1]), flush=True)
    from results import machine, publish

    intro = (
        f"`python bench/scale_browser.py --nodes {args.nodes}`, "
        f"{time.strftime('%Y-%m-%d')}, {machine()}, JupyterLab and Debian's Chromium "
        "(headless) on the same machine; the load columns are the 1-minute load average "
        "before and after each size's run. " + DESCRIPTION
    )
    publish(table(rows), SECTION if args.write else None, intro)
    return 0


DESCRIPTION = (
    "The browser test's notebook (tests/browser/test_scale_browser.py) at each size: the "
    "kernel shows the dashboard of a monitor of N x 8 ranks (a step every 8 s per rank, two "
    "ranks 1.8x slower, one node never heard from), three ranks are opened in the rank "
    "picker, then the kernel feeds reports for 25 s while the page times each chart redraw "
    "from plotly's own events (`plotly_beforeplot` to `plotly_afterplot`). The chart holds "
    "the median, the min-max band, the outlier ranks and the ranks opened, whatever the "
    "number of ranks; the goal is 100 ms a redraw."
)

if __name__ == "__main__":
    sys.exit(main())
