"""The dashboard inside a real kernel (jupyter_client): flood, latency, memory, a real job.

One kernel serves the module. The flood test is the issue's load figure:
8 ranks printing 5,000 lines a second each while another cell must run
within 200 ms and memory stays bounded by the monitor's ring buffers. The
job test runs ``%%distrain`` for real and checks what the notebook gets:
the widget view with a static snapshot, refreshed once the job ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.kernel_harness import Kernel, kernel

from .kernel_flood import flood

#: It measures the kernel's line rate, latency and memory: alone (``make test``'s serial run).
pytestmark = pytest.mark.serial

#: The kernel stays responsive: a trivial cell never waits a second behind the flood.
#: The 200 ms target itself is measured (median, p95, max) by bench/monitor.py.
LATENCY_BOUND = 1.0
MEDIAN_BOUND = 0.200
RANKS, RATE = 8, 5000
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def k() -> Iterator[Kernel]:
    with kernel() as session:
        yield session


def test_flood_keeps_the_kernel_responsive_and_memory_bounded(k: Kernel) -> None:
    result = flood(k, seconds=6.0, ranks=RANKS, rate=RATE)
    assert result.errors == []
    assert result.line_rate >= 0.9 * RANKS * RATE, f"flood reached {result.line_rate:.0f} lines/s"
    assert len(result.latencies) >= 15
    assert max(result.latencies) < LATENCY_BOUND, sorted(result.latencies)[-5:]
    assert result.median_latency() < MEDIAN_BOUND, sorted(result.latencies)
    # at most 10 renders a second, and the render thread keeps up
    assert result.seconds / 2 <= result.renders <= 10 * result.seconds + 1
    assert result.widget_updates > 0, "widget updates from the render thread reached iopub"
    # memory: the ring buffers hold the lines, not the process
    assert result.total == result.log_lines
    assert result.kept <= RANKS * result.log_limit
    assert result.rss_growth < 40 * 2**20, f"RSS grew {result.rss_growth / 2**20:.1f} MiB"
    # the display carries the widget view and, after the end, the final static snapshot
    final = [d for d in result.displays if WIDGET_MIME in d["data"]][-1]
    assert final["data"]["text/plain"].startswith("flood [local/gloo] Succeeded")
    assert 'data-state="Succeeded"' in final["data"]["text/html"]


def test_live_mode_auto_is_the_dashboard_in_a_kernel(k: Kernel) -> None:
    k.run("%load_ext jupyter_disttrain")
    out = k.run(
        "m = get_ipython().magics_manager.registry['DistrainMagics']\n"
        "print(m._live_mode()); m.live = 'text'; print(m._live_mode()); m.live = 'auto'"
    )
    assert out.split() == ["widget", "text"]


@pytest.mark.slow
def test_a_real_job_shows_the_dashboard_and_keeps_its_final_state(k: Kernel) -> None:
    k.run("%load_ext jupyter_disttrain")
    mark = len(k.iopub)
    k.run(
        "%%distrain --nodes 1 --nproc 2 --wait --name kernel-dash -o job\n"
        "import torch.distributed as dist\n"
        "for step in range(5):\n"
        "    report(step=step, loss=1.0 / (step + 1))\n"
        "print('rank', dist.get_rank(), 'finished')\n"
        "dist.get_world_size()",
        timeout=240,
    )
    k.drain(0.5)
    shown = [
        m["content"]
        for m in k.iopub[mark:]
        if m["msg_type"] in ("display_data", "update_display_data")
        and WIDGET_MIME in m["content"]["data"]
    ]
    assert shown, "the cell displayed the dashboard"
    assert shown[0]["data"]["text/plain"].startswith("kernel-dash [local")
    final = shown[-1]["data"]
    assert "Succeeded" in final["text/plain"].splitlines()[0]
    assert final["text/html"].count('data-state="Succeeded"') >= 3  # header + 2 rank rows
    out = k.run(
        "import json\n"
        "d = job.monitor.snapshot()\n"
        "print(json.dumps([d['state'], len(d['ranks']), d['logs']['total'] > 0]))"
    )
    assert json.loads(out) == ["Succeeded", 2, True]
