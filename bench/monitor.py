"""Monitor and dashboard benchmark: parsing, kernel latency under a log flood, downsampling.

(a) event-parse throughput: worker lines through ``events.parse_line`` and
    ``JobMonitor.feed`` (8 ranks; plain log lines and protocol metric lines);
(b) a real Jupyter kernel showing the dashboard of a job whose 8 ranks print
    5,000 lines a second each: time for another cell to run, renders per
    second, memory growth (``tests/widgets/kernel_flood.py`` drives it);
(c) downsampling 1,000,000 points (``downsample.lttb`` / ``minmax`` and the
    plot's incremental min/max buckets), and what the plot sends to the
    browser while a series grows to 1,000,000 points;
(d) what a rank's resource sample costs it (``runtime.resources.Sampler``,
    one every second by default, sampled and encoded as its line).

``python bench/monitor.py [--flood-seconds 10]`` prints the figures and
rewrites the "Monitor" section of ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from results import machine as machine_name  # noqa: E402
from results import write_section  # noqa: E402

from jupyter_disttrain.events import Event, Trust, parse_line  # noqa: E402
from jupyter_disttrain.monitor import JobMonitor  # noqa: E402
from jupyter_disttrain.runtime.protocol import KINDS, PREFIX, encode  # noqa: E402
from jupyter_disttrain.widgets.downsample import lttb, minmax  # noqa: E402


def best_of(fn: Callable[[], object], reps: int = 5) -> float:
    """Fastest of ``reps`` runs, seconds."""
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


KEY = bytes(range(32))
TRUST = Trust.of(KEY, 2, 4)


def trusting_parse(line: str, rank: int | None, now: float) -> Event:
    """How lines were read before they were signed: any marked JSON believed, unchecked.

    The baseline of the signed path in the same run (it must not be used by the product).
    """
    start = line.find(PREFIX)
    if start != -1:
        try:
            body = json.loads(line[start + len(PREFIX) :].rpartition(" ")[0])
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("kind") in KINDS:
            kind, src, t = body.pop("kind"), body.pop("rank", rank), body.pop("t", now)
            body.pop("v", None)
            return Event(kind, src, float(t), body)
    return Event("log", rank, now, {"text": line.rstrip()})


def signed_parse(line: str, rank: int | None, now: float) -> Event:
    """The product's path: signature, rank and fields checked."""
    return parse_line(line, rank, now, trust=TRUST)


def parse_throughput(n: int = 400_000) -> dict[str, tuple[float, float]]:
    """Lines per second through parse + JobMonitor.feed: (signed and checked, trusting)."""
    plain = [(f"step {i // 8} rank {i % 8}: loss=0.{i % 997:03d} lr=3e-4", i % 8) for i in range(n)]
    metrics = [
        (
            encode(
                "metric",
                i % 8,
                sign_with=KEY,
                step=i // 8,
                values={"loss": 1 / (i + 1), "lr": 3e-4},
            ),
            i % 8,
        )
        for i in range(n // 4)
    ]
    mixed = [metrics[i // 10] if i % 10 == 0 else plain[i] for i in range(n)]
    out = {}
    for name, lines in (("log lines", plain), ("metric lines", metrics), ("mixed 9:1", mixed)):
        rates = []
        for parse in (signed_parse, trusting_parse):

            def run(lines: list[tuple[str, int]] = lines, parse: Any = parse) -> None:
                mon = JobMonitor("bench", "local", 8, nodes=2, nproc=4)
                feed = mon.feed
                for text, rank in lines:
                    feed(parse(text, rank, 1.0))

            rates.append(len(lines) / best_of(run, 3))
        out[name] = (rates[0], rates[1])
    return out


def recorded_job(home: Path, name: str, n: int, ranks: int = 8) -> int:
    """Write a finished local job with ``n`` rank lines (a metric line in ten) under ``home``,
    as its owner leaves it; the number of lines."""
    from jupyter_disttrain import events as ev
    from jupyter_disttrain.backends.local import jobdir
    from jupyter_disttrain.runtime import jobkey

    directory = home / "jobs" / name
    jobdir.make_private_dirs(jobdir.logs_dir(directory))
    jobdir.write_private(directory / jobkey.KEY_FILE, KEY)
    t0 = time.time() - 60
    state = {
        "name": name,
        "backend": "local",
        "nodes": 2,
        "nproc": ranks // 2,
        "world_size": ranks,
        "created": t0,
        "owner_pid": 0,
        "state": "Succeeded",
        "reason": "Succeeded",
        "message": f"{ranks} ranks done",
        "ended": t0 + 50,
    }
    jobdir.write_json_atomic(directory / "state.json", state)
    with jobdir.open_private(directory / "events.jsonl", "a") as fh:
        fh.write(ev.to_json(ev.job_event("Pending", "Submitted", f"{ranks} ranks", t0)) + "\n")
        fh.write(ev.to_json(ev.job_event("Running", "Started", "ok", t0 + 1)) + "\n")
        fh.write(ev.to_json(ev.job_event("Succeeded", "Succeeded", "done", t0 + 50)) + "\n")
    for rank in range(ranks):
        lines = []
        for i in range(n // ranks):
            if i % 10 == 0:
                values = {"loss": 1 / (i + 1), "lr": 3e-4}
                line = encode(
                    "metric", rank, sign_with=KEY, step=i, t=t0 + 2 + i * 1e-3, values=values
                )
            else:
                line = f"step {i} rank {rank}: loss=0.{i % 997:03d} lr=3e-4"
            lines.append(line + "\n")
        (directory / "logs" / f"rank-{rank}.log").write_text("".join(lines))
    return n // ranks * ranks


def server_follow(n: int = 200_000) -> dict[str, float]:
    """Lines per second of a recorded job made visible by the server's follower (the
    sidebar's ``Followers``: first follow, and a fresh server process following it again)."""
    import os
    import tempfile

    from jupyter_disttrain.backends.local import LocalBackend
    from jupyter_disttrain.service.following import Followers

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DISTRAIN_HOME"] = tmp
        lines = recorded_job(Path(tmp), "bench-server", n)
        backend = LocalBackend()
        (record,) = backend.list_jobs()
        for name in ("first follow", "again, new process"):
            followers = Followers()
            started = time.perf_counter()
            replay = followers.follow(backend, record)
            if replay is not None:
                replay.join(600)
            view = followers.monitor(backend.name, record.name)
            assert view is not None, "the server follows the recorded job"
            snap = view.snapshot()
            elapsed = time.perf_counter() - started
            assert snap["state"] == "Succeeded" and snap["step"] is not None, snap["state"]
            followers.close()
            out[name] = lines / elapsed
        del os.environ["DISTRAIN_HOME"]
    return out


def load() -> str:
    """The 1-minute load average (the machine is shared)."""
    return f"{os.getloadavg()[0]:.2f}"


def downsampling(n: int = 1_000_000, n_out: int = 2000) -> dict[str, float]:
    """Milliseconds to reduce ``n`` points to ``n_out``."""
    from jupyter_disttrain.widgets.trace_feed import MinMaxReducer

    rng = np.random.default_rng(0)
    x = np.arange(n, dtype=np.float64)
    y = np.cumsum(rng.normal(size=n))
    return {
        "downsample.lttb": best_of(lambda: lttb(x, y, n_out)) * 1000,
        "downsample.minmax": best_of(lambda: minmax(x, y, n_out)) * 1000,
        "plot buckets (MinMaxReducer)": best_of(lambda: MinMaxReducer(n_out).push(x, y)) * 1000,
    }


def resource_sample_cost(n: int = 2000) -> float:
    """Microseconds a rank spends on one resource sample and its line (median of 5 runs)."""
    from jupyter_disttrain.runtime.resources import Sampler

    sampler = Sampler()
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            encode("resources", 0, **sampler.sample())
        runs.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(runs)


def plot_traffic(n: int = 1_000_000, chunk: int = 10_000, budget: int = 4000) -> dict[str, float]:
    """A series growing to ``n`` points in ``chunk`` s, a render after each: what is sent."""
    from jupyter_disttrain.widgets.plot import MetricPlot

    mon = JobMonitor("bench", "local", 1)
    plot = MetricPlot(mon, budget=budget, draw_every=0)  # each render draws its points
    plot.render(mon.snapshot())
    plot.figure._handle_custom_msg({"type": "ready"}, [])
    rng = np.random.default_rng(1)
    values = (np.cumsum(rng.normal(size=n)) + 1e4).tolist()
    renders = 0
    started = time.perf_counter()
    render_s = 0.0
    for start in range(0, n, chunk):
        mon.feed_many(
            Event("metric", 0, 1.0 + i, {"step": i, "values": {"loss": values[i]}})
            for i in range(start, start + chunk)
        )
        t = time.perf_counter()
        plot.render(mon.snapshot())
        render_s += time.perf_counter() - t
        renders += 1
    stats = plot.figure.stats
    return {
        "points": float(n),
        "renders": float(renders),
        "points sent": float(stats.points),
        "bytes sent": float(stats.bytes),
        "shown": float(plot.figure.shown_points()),
        "render ms": render_s / renders * 1000,
        "seconds": time.perf_counter() - started,
    }


def kernel_flood(seconds: float) -> dict[str, float]:
    """Latency of a trivial cell while 8 ranks x 5,000 lines/s flood the dashboard."""
    from tests.kernel_harness import kernel
    from tests.widgets.kernel_flood import flood

    with kernel() as k:
        idle = []
        for _ in range(20):
            elapsed, _ = k.execute("1 + 1")
            idle.append(elapsed)
            time.sleep(0.05)
        result = flood(k, seconds=seconds, ranks=8, rate=5000)
    return {
        "idle p50 ms": statistics.median(idle) * 1000,
        "lines/s": result.line_rate,
        "probes": float(len(result.latencies)),
        "p50 ms": result.median_latency() * 1000,
        "p95 ms": result.latency(0.95) * 1000,
        "max ms": max(result.latencies) * 1000,
        "renders/s": result.render_rate,
        "widget updates": float(result.widget_updates),
        "rss growth MiB": result.rss_growth / 2**20,
        "kept": float(result.kept),
        "total": float(result.total),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood-seconds", type=float, default=10.0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)

    machine = machine_name()
    print(f"machine: {machine}")
    parse = parse_throughput()
    for name, (rate, before) in parse.items():
        print(f"parse+feed {name}: {rate:,.0f} lines/s signed, {before:,.0f} unsigned")
    print(f"load average {load()}")
    served = server_follow()
    for name, rate in served.items():
        print(f"server follower, {name}: {rate:,.0f} lines/s")
    print(f"load average {load()}")
    down = downsampling()
    for name, ms in down.items():
        print(f"1,000,000 -> 2,000 points, {name}: {ms:.1f} ms")
    traffic = plot_traffic()
    print(f"plot traffic: {traffic}")
    sample_us = resource_sample_cost()
    print(f"resource sample and its line: {sample_us:.0f} us")
    flood = kernel_flood(args.flood_seconds)
    print(f"kernel flood: {flood}")
    print(f"load average {load()}")

    body = f"""
Machine: {machine}, {time.strftime("%Y-%m-%d")}. Script: `bench/monitor.py` (`make bench`).

**Event parsing** (`events.parse_line` + `JobMonitor.feed`, 8 ranks, one thread). Control
lines are signed with the job key and every field is checked; the second column reads the
same lines as they were read before signing (marked JSON believed unchecked), in the same run:

| lines | lines/s, signed and checked | lines/s, unsigned (before) | ratio |
|---|---|---|---|
""" + "".join(
        f"| {name} | {rate:,.0f} | {before:,.0f} | {rate / before:.2f} |\n"
        for name, (rate, before) in parse.items()
    )
    body += (
        "\n**The sidebar server's follower** (`service.following.Followers`, its own process):"
        " a finished local job of 8 ranks, 200,000 lines (one in ten a signed metric line), "
        "made visible from the time the server starts following it to its snapshot:\n\n"
        "| follow | lines/s |\n|---|---|\n"
        + "".join(f"| {name} | {rate:,.0f} |\n" for name, rate in served.items())
        + f"\nLoad average (1 min) at the end of the run: {load()}.\n"
    )
    body += f"""
**Kernel under a log flood**: a real kernel (jupyter_client) shows the dashboard of a
job whose 8 ranks print 5,000 lines/s each (plus a metric line per rank every 10 ms),
fed through `parse_line` and `Job.feed` from a thread for {args.flood_seconds:g} s, while
the client runs `1 + 1` every 0.2 s and times it to its reply.

| measure | value |
|---|---|
| lines fed | {flood["lines/s"]:,.0f} lines/s |
| trivial cell, idle kernel (median) | {flood["idle p50 ms"]:.1f} ms |
| trivial cell under the flood: median / p95 / max of {flood["probes"]:.0f} | {flood["p50 ms"]:.1f} / {flood["p95 ms"]:.1f} / {flood["max ms"]:.1f} ms |
| dashboard renders | {flood["renders/s"]:.1f} per second (limit 10) |
| widget updates published from the render thread | {flood["widget updates"]:.0f} |
| log lines received / kept (ring buffers) | {flood["total"]:,.0f} / {flood["kept"]:,.0f} |
| RSS growth after the first second | {flood["rss growth MiB"]:.1f} MiB |

**Downsampling 1,000,000 points to 2,000** (best of 5):

| method | ms |
|---|---|
""" + "".join(f"| {name} | {ms:.1f} |\n" for name, ms in down.items())  # noqa: E501
    body += (
        f"\n**Plot traffic for a growing series**: one series grows to "
        f"{traffic['points']:,.0f} points, {traffic['renders']:.0f} renders of 10,000 new points "
        f"each (plot budget 4,000 points). Sent to the browser in all: "
        f"{traffic['points sent']:,.0f} points ({traffic['bytes sent'] / 1024:,.0f} KiB); "
        f"shown at the end: {traffic['shown']:,.0f} points; {traffic['render ms']:.1f} ms "
        "per render.\n"
        f"\n**A rank's resource sample** (`runtime.resources.Sampler`, CPU, RSS and GPU "
        f"memory, encoded as its line; one a second by default): {sample_us:.0f} µs each, "
        "the median of 5 runs of 2,000.\n"
    )
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", "Monitor", body)
        print("wrote the Monitor section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
