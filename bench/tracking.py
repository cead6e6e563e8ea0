"""Tracking sinks benchmark: what TensorBoard files and an MLflow run cost the monitor.

(a) metric lines through ``events.parse_line`` and ``Job.feed`` (8 ranks, two
    values a line) with no sink, with the TensorBoard sink, and with the
    TensorBoard and MLflow sinks (a real ``mlflow server`` on 127.0.0.1):
    the feeding thread's rate, which is what the backend's reader and the
    monitor see;
(b) each sink's own work for those lines: seconds from the job's end to the
    sink having written everything (its thread drains the queue), and the
    rate it writes at.

``python bench/tracking.py [--lines 40000]`` prints the figures and rewrites
the "Tracking" section of ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from results import machine as machine_name  # noqa: E402
from results import write_section  # noqa: E402

from jupyter_disttrain import events as ev  # noqa: E402
from jupyter_disttrain.backends.registry import get_backend  # noqa: E402
from jupyter_disttrain.job import Job  # noqa: E402
from jupyter_disttrain.runtime.protocol import encode  # noqa: E402
from jupyter_disttrain.spec import JobSpec  # noqa: E402
from jupyter_disttrain.tracking import Sink, sinks_for  # noqa: E402

RANKS = 8
KEY = bytes(range(32))
TRUST = ev.Trust.of(KEY, 2, RANKS // 2)


def lines(n: int) -> list[tuple[str, int]]:
    """``n`` metric lines, round-robin over the ranks."""
    return [
        (
            encode(
                "metric",
                i % RANKS,
                sign_with=KEY,
                step=i // RANKS,
                values={"loss": 1 / (i + 1), "lr": 3e-4},
            ),
            i % RANKS,
        )
        for i in range(n)
    ]


Result = tuple[float, dict[str, tuple[float, float]]]


def run(spec: JobSpec, feed_lines: list[tuple[str, int]]) -> Result:
    """Feed the lines to a job with the spec's sinks.

    Returns lines/s fed, and for each sink: seconds from the end to finished, CPU seconds.
    """
    job = Job(spec, get_backend("local"))
    sinks: list[Sink] = sinks_for(spec, job.feed)
    for sink in sinks:
        job.add_listener(sink.on_event)
    feed = job.feed
    started = time.perf_counter()
    for text, rank in feed_lines:
        feed(ev.parse_line(text, rank, trust=TRUST))
    fed = time.perf_counter() - started
    feed(ev.job_event("Succeeded"))
    ended = time.perf_counter()
    drains: dict[str, tuple[float, float]] = {}
    for sink in sinks:
        assert sink.close(600), f"{sink.name} did not finish"
        assert not sink.warnings, sink.warnings
        drains[sink.name] = (time.perf_counter() - ended, sink.cpu_seconds)
    return len(feed_lines) / fed, drains


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=40_000)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    from tests.tracking.mlflow_server import running_server

    machine = machine_name()
    print(f"machine: {machine}")
    feed_lines = lines(args.lines)
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        base = Path(tmp)
        (base / "server").mkdir()
        with running_server(base / "server") as server:
            cases = {
                "no sink": JobSpec("bench-none", tensorboard="off"),
                "TensorBoard": JobSpec("bench-tb", tensorboard=str(base / "tb")),
                "TensorBoard + MLflow": JobSpec(
                    "bench-both", tensorboard=str(base / "tb"), mlflow=server.uri
                ),
            }
            results = {name: run(spec, feed_lines) for name, spec in cases.items()}
    base_rate = results["no sink"][0]
    for name, (rate, drains) in results.items():
        print(f"{name}: {rate:,.0f} lines/s fed; drained after the end: {drains}")

    n = args.lines
    body = f"""
Machine: {machine}, {time.strftime("%Y-%m-%d")}. Script: `bench/tracking.py` (`make bench`).

**Feeding** {n:,} metric lines (8 ranks, two values a line) through `parse_line` and
`Job.feed` on one thread, the sinks attached as the service attaches them (their
listener only queues; they write on threads of their own). MLflow: a real
`mlflow server` on 127.0.0.1 (SQLite store).

| sinks | lines/s fed | vs. no sink |
|---|---|---|
""" + "".join(
        f"| {name} | {rate:,.0f} | {rate / base_rate - 1:+.0%} |\n"
        for name, (rate, _) in results.items()
    )
    body += f"""
**The sinks' own work** for those {n:,} lines ({2 * n:,} values): their thread's CPU
time per line (what they take from the notebook's process), and the seconds from the
job's end event until everything is written and closed (MLflow: the server's SQLite
store on the same two cores takes about a second per 1,000-metric batch).

| sink | CPU per line | at 1,000 lines/s | seconds after the end |
|---|---|---|---|
"""
    for case, sink, label in (
        ("TensorBoard", "tensorboard", "TensorBoard files"),
        ("TensorBoard + MLflow", "mlflow", "MLflow run"),
    ):
        seconds, cpu = results[case][1][sink]
        per_line = cpu / n
        body += (
            f"| {label} | {per_line * 1e6:.0f} µs | {per_line * 1000:.1%} of a core "
            f"| {seconds:.1f} |\n"
        )
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", "Tracking", body)
        print("wrote the Tracking section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
