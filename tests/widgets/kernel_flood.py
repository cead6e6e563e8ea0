"""A real Jupyter kernel under a log flood, driven over jupyter_client (tests and bench).

Inside the kernel a :class:`~jupyter_disttrain.job.Job` shows its dashboard
exactly as ``%%distrain`` does (``LiveView("widget")``), and a thread feeds
it synthetic worker lines at ``ranks x rate`` lines per second through
``events.parse_line`` and ``Job.feed`` (the backend's path). Meanwhile the
client runs small cells and times them, and reads everything the kernel
publishes (the dashboard's widget updates come from its render thread).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from tests.kernel_harness import Kernel

SETUP = """
import json, os, sys, threading, time
import psutil
from jupyter_disttrain.backends.registry import get_backend
from jupyter_disttrain.events import Trust, job_event
from jupyter_disttrain.events import parse_line as _parse_line
from jupyter_disttrain.job import Job
from jupyter_disttrain.textview import LiveView
from jupyter_disttrain.runtime.protocol import encode as _encode
from jupyter_disttrain.spec import JobSpec

_KEY = bytes(range(32))
_TRUST = Trust.of(_KEY, 2, {nproc})

def encode(kind, rank, **fields):
    return _encode(kind, rank, sign_with=_KEY, **fields)

def parse_line(line, rank, now=None):
    return _parse_line(line, rank, now, trust=_TRUST)

flood_job = Job(JobSpec(name="flood", nodes=2, nproc={nproc}), get_backend("local"))
flood_view = LiveView("widget")
flood_job.add_listener(flood_view.on_event)
flood_view.attach(flood_job)
flood_stats = {{}}

def _flood(seconds, ranks, rate, tick=0.01):
    proc = psutil.Process()
    per_tick = max(1, round(rate * tick))
    flood_job.feed(job_event("Running"))
    for r in range(ranks):
        flood_job.feed(parse_line(encode("hello", r, local_rank=r % {nproc}, world_size=ranks,
                                         node_rank=r // {nproc}, host="node", pid=r,
                                         backend="gloo"), r))
    lines = log_lines = 0
    start = time.monotonic()
    k = 0
    rss = []
    renders0 = flood_view._dashboard.renders
    while time.monotonic() - start < seconds:
        now = time.time()
        for r in range(ranks):
            for j in range(per_tick):
                flood_job.feed(parse_line(
                    f"step {{k}} micro-batch {{j}} rank {{r}}: loss=0.{{k % 997:03d}} "
                    "lr=3.0e-4 tokens/s=81234.5", r, now))
            metric = encode("metric", r, step=k, values={{"loss": 1 / (k + 1)}})
            flood_job.feed(parse_line(metric, r, now))
            lines += per_tick + 1
            log_lines += per_tick
        k += 1
        if k % 50 == 0:
            rss.append(proc.memory_info().rss)
        delay = start + k * tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.monotonic() - start
    snap = flood_job.monitor.snapshot()
    flood_stats.update(lines=lines, log_lines=log_lines, seconds=elapsed, rss=rss,
                       renders=flood_view._dashboard.renders - renders0,
                       kept=snap["logs"]["kept"], total=snap["logs"]["total"],
                       log_limit=flood_job.monitor.log_limit,
                       errors=flood_view._dashboard.render_errors)

flood_thread = None
"""

START = """
flood_thread = threading.Thread(target=_flood, args=({seconds}, {ranks}, {rate}), daemon=True)
flood_thread.start()
"""

FINISH = """
flood_thread.join(60)
flood_job.feed(job_event("Succeeded"))
flood_view.close()
print(json.dumps(flood_stats))
"""


@dataclass
class FloodResult:
    """What a flood run measured (latencies in seconds, memory in bytes)."""

    lines: int
    log_lines: int
    seconds: float
    latencies: list[float]
    rss: list[int]
    renders: int
    kept: int
    total: int
    log_limit: int
    errors: list[str]
    widget_updates: int
    displays: list[dict[str, Any]] = field(default_factory=list)

    @property
    def line_rate(self) -> float:
        return self.lines / self.seconds

    @property
    def render_rate(self) -> float:
        return self.renders / self.seconds

    @property
    def rss_growth(self) -> int:
        """RSS at the end minus RSS one second into the flood."""
        return self.rss[-1] - self.rss[min(1, len(self.rss) - 1)]

    def latency(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def median_latency(self) -> float:
        return statistics.median(self.latencies)


def flood(
    k: Kernel, *, seconds: float = 5.0, ranks: int = 8, rate: int = 5000, probe: float = 0.2
) -> FloodResult:
    """Flood the kernel's dashboard and time a trivial cell every ``probe`` seconds."""
    k.run(SETUP.format(nproc=ranks // 2))
    k.drain()
    mark = len(k.iopub)
    k.execute(START.format(seconds=seconds, ranks=ranks, rate=rate))
    latencies: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end - probe:
        time.sleep(probe)
        elapsed, _ = k.execute("1 + 1")
        latencies.append(elapsed)
    stats = json.loads(k.run(FINISH))
    k.drain(0.2)
    published = k.iopub[mark:]
    updates = sum(
        1
        for m in published
        if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "update"
    )
    displays = [
        m["content"] for m in k.iopub if m["msg_type"] in ("display_data", "update_display_data")
    ]
    return FloodResult(
        lines=stats["lines"],
        log_lines=stats["log_lines"],
        seconds=stats["seconds"],
        latencies=latencies,
        rss=stats["rss"],
        renders=stats["renders"],
        kept=stats["kept"],
        total=stats["total"],
        log_limit=stats["log_limit"],
        errors=stats["errors"],
        widget_updates=updates,
        displays=displays,
    )
