"""Following 64 to 1,024 nodes x 8 ranks from the notebook: cost and speed of reading.

``python bench/scale.py --nodes 64,256,1024 [--kinds trainjob,pytorchjob]`` runs, for
each size, a TrainJob (and/or a PyTorchJob) of stand-in ranks (tests/scale_harness.py:
every rank's signed lines, the real relay over a real c10d store, rank 0's real hang
watch; one process plays every node, the emulator serves every pod) and follows it from
a separate process as a notebook kernel does (``service.attach``), while another process
plays the jupyter_server sidebar (``JobManager.job`` every 2 s). Each rank reports one
metric a second; 3 ranks straggle; one rank raises at step ``--fail-step``. A second run
per size hangs one node (``--hang``). Printed with the machine's load; ``--write``
rewrites the "Scale" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from jupyter_disttrain.runtime.protocol import PREFIX  # noqa: E402
from jupyter_disttrain.runtime.standin_store import MARK as STORE_MARK  # noqa: E402

NAME = "scale"
#: Seconds over which the kernel's CPU is measured, once every rank was heard (before the
#: failing step or the hang: see ``--fail-step``).
CPU_SECONDS = 20.0
#: Seconds the kernel waits for the failing rank or the hung node to be named (else "not named").
NAMED_WITHIN = 120.0


def rss_mib() -> float:
    """This process's peak resident memory (``VmHWM``: getrusage's survives ``exec``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's live threads, by name (``/proc``; threads no
    Python code started, a C library's, are "native")."""
    names = {t.native_id: re.sub(r"-\d+", "", t.name) for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        name = names.get(int(tid), "native")
        seconds[name] = seconds.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return seconds


def kernel(world: int, hang: bool) -> dict[str, Any]:
    """Follow the job as a kernel does; what it cost and how fast it read."""
    from jupyter_disttrain.backends.kubernetes import KubernetesBackend
    from jupyter_disttrain.service import attach

    lags: list[float] = []
    errors: list[float] = []
    read = [0]  # lines read from the followed pod log (stage 3 of the stage counts)

    class Counting(KubernetesBackend):
        def stream_log(self, *args: Any, **kwargs: Any) -> Any:
            for line in super().stream_log(*args, **kwargs):
                read[0] += 1
                yield line

    def listen(event: Any) -> None:
        if event.kind == "metric":
            lags.append(time.time() - event.t)
        elif event.kind == "error" and not errors:
            errors.append(event.t)

    job = attach(NAME, Counting(), [listen])
    monitor = job.monitor
    out: dict[str, Any] = {}
    started = time.monotonic()
    deadline = started + 600
    while len(monitor.metric_ranks("loss")) < world and time.monotonic() < deadline:
        if monitor.first_failure() is not None:
            break  # the job fails before every rank was heard: say how many were
        time.sleep(0.2)
    out["ranks_heard"] = len(monitor.metric_ranks("loss"))
    out["heard_s"] = time.monotonic() - started
    cpu0, wall0, threads0 = time.process_time(), time.monotonic(), thread_cpu()
    heard0 = len(lags)
    time.sleep(CPU_SECONDS)  # every rank reporting once a second
    wall = time.monotonic() - wall0
    out["window_metrics_per_s"] = (len(lags) - heard0) / wall
    # the measure is of steady training: a failure or hang inside the window is said
    out["fault_in_window"] = monitor.first_failure() is not None or monitor.hang() is not None
    out["cpu_pct"] = 100 * (time.process_time() - cpu0) / wall
    used = {name: cpu - threads0.get(name, 0.0) for name, cpu in thread_cpu().items()}
    out["threads_pct"] = {n: round(100 * c / wall, 1) for n, c in used.items() if c > 0}
    out["lag_p50"] = statistics.median(lags)
    out["lag_p99"] = statistics.quantiles(lags, n=100)[98]
    deadline = time.monotonic() + NAMED_WITHIN
    if hang:
        while monitor.hang() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        found = monitor.hang()
        if found is not None:
            out["hang_named_s"] = time.time() - last_metric_t(monitor)
            out["hang_odd"] = [found.odd[0], found.odd[-1]] if found.odd else []
    else:
        while (monitor.first_failure() is None or not errors) and time.monotonic() < deadline:
            time.sleep(0.1)
        if errors and monitor.first_failure() is not None:
            out["fail_named_s"] = time.time() - errors[0]
            out["fail_rank"] = monitor.first_failure()[0]  # type: ignore[index]
    out["kernel_rss_mib"] = rss_mib()
    out["ranks_heard_end"] = len(monitor.metric_ranks("loss"))
    out["lines_read"] = read[0]
    out["metrics_heard"] = len(lags)
    return out


def last_metric_t(monitor: Any) -> float:
    columns = monitor.metrics_columns()
    return float(max(columns["t"])) if len(columns.get("t", [])) else time.time()


def server(seconds: float) -> dict[str, Any]:
    """The sidebar's job JSON, asked every 2 s as the sidebar does; its size and cost."""
    from jupyter_disttrain.backends.kubernetes import KubernetesBackend
    from jupyter_disttrain.server.manager import JobManager

    manager = JobManager(backends=lambda: [KubernetesBackend()], list_timeout=120)
    sizes, took = [], []
    end = time.monotonic() + seconds
    cpu0, wall0 = time.process_time(), time.monotonic()
    while time.monotonic() < end:
        t0 = time.monotonic()
        sizes.append(len(json.dumps(manager.job("kubernetes", NAME))))
        took.append(time.monotonic() - t0)
        time.sleep(2.0)
    cpu_pct = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
    manager.close()
    return {
        "server_cpu_pct": cpu_pct,
        "json_kib": max(sizes) / 1024,
        "json_ms": 1000 * statistics.median(took[1:] or took),
        "server_rss_mib": rss_mib(),
    }


def child(role: str, kubeconfig: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    argv = [sys.executable, __file__, "--role", role, *args]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)


#: The emulator's APIs each job kind needs.
APIS: dict[str, tuple[str, ...]] = {"trainjob": ("trainer",), "pytorchjob": ("kubeflow-v1",)}


def measure(
    nodes: int, hang: bool, fail_step: int, kind: str = "trainjob", step_seconds: float = 1.0
) -> dict[str, Any]:
    """One run; ``fail_step`` counts steps of 1 s: with shorter steps the failure (or hang)
    comes at the same time, at a later step."""
    world = nodes * 8
    at = round(fail_step / step_seconds)
    script: dict[str, Any] = {"stragglers": (517 % world, 2051 % world, 4000 % world)}
    if hang:
        script |= {"hang_node": nodes // 2, "hang_step": at, "steps": 1_000_000}
    else:
        script |= {"fail_rank": world // 2 + 3, "fail_step": at, "steps": at + 10}
    return _measured(nodes, hang, kind, step_seconds, script, world, fail_step)


def _measured(
    nodes: int,
    hang: bool,
    kind: str,
    step_seconds: float,
    script: dict[str, Any],
    world: int,
    fail_step: int,
) -> dict[str, Any]:
    """:func:`measure`'s run."""
    from tests.k8s_emulator.emulator import Emulator
    from tests.scale_harness import create_standin_job

    with tempfile.TemporaryDirectory() as tmp, Emulator(apis=APIS[kind]) as emulator:
        kubeconfig = str(emulator.write_kubeconfig(Path(tmp) / "kubeconfig"))
        t0 = time.monotonic()
        create_standin_job(
            emulator,
            NAME,
            kind,
            nodes,
            8,
            hang_after=10.0,
            step_seconds=step_seconds,
            **script,
        )
        emulator.reset_stats()
        tally = NodeZeroLog(emulator)
        tally.start()
        follower = child("kernel", kubeconfig, str(world), "1" if hang else "0")
        sidebar = child("server", kubeconfig, str(fail_step + 20))
        out, _ = follower.communicate(timeout=3600)
        written = tally.tally()
        side, _ = sidebar.communicate(timeout=3600)
        stats = emulator.stats()
        row: dict[str, Any] = {"nodes": nodes, "ranks": world, "hang": hang, "kind": kind}
        row["step_seconds"] = step_seconds
        row |= json.loads(out.splitlines()[-1])
        row |= written
        row |= json.loads(side.splitlines()[-1])
        row |= {
            "requests": stats.total,
            "streams_peak": stats.streams.peak,
            "connections_peak": stats.connections.peak,
            "log_follows_peak": stats.log_follows.peak,
            "wall_s": time.monotonic() - t0,
            "load": os.getloadavg()[0],
        }
    if emulator.http_stop_late:  # its pods were stopped all the same: the row stands
        row["emulator_stop"] = "late"
    return row


class NodeZeroLog(threading.Thread):
    """What the stand-in wrote into node 0's pod log (stage 2 of the stage counts), tallied
    every second while the kernel follows (the pods, and their logs, go once the job failed):
    lines, metric lines, the ranks they came from, error lines, and the seconds from a metric
    line's ``t`` to its arrival in the log (the stand-in's signing and the relay)."""

    def __init__(self, emulator: Any) -> None:
        super().__init__(daemon=True)
        self.emulator = emulator
        self.stop = threading.Event()
        self.read = 0
        self.metrics = 0
        self.errors = 0
        self.ranks: set[int] = set()
        self.lags: list[float] = []
        self.refused: list[str] = []  # what rank 0's relay said it skipped
        self.store: list[dict[str, Any]] = []  # the stand-in's store requests per second
        self.streams: list[int] = []  # long-lived API connections open, each second

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.streams.append(self.emulator.stats().streams.current)
            hosted = self.emulator.kubelet.standins.job({"DISTRAIN_STANDIN_JOB": NAME})
            if hosted is None or 0 not in hosted.logs:
                continue
            new = hosted.logs[0].read(self.read)[0]
            self.read += len(new)
            for stamp, line in new:
                if line.startswith(b"distrain: refused"):
                    self.refused.append(line.decode(errors="replace").strip())
                    continue
                if line.startswith(STORE_MARK.encode()):
                    self.store.append(json.loads(line[len(STORE_MARK) :]))
                    continue
                for item in self.carried(line):
                    if item.get("kind") == "metric":
                        self.metrics += 1
                        self.ranks.add(int(item.get("rank", -1)))
                        self.lags.append(stamp - float(item.get("t", stamp)))
                    elif item.get("kind") == "error":
                        self.errors += 1

    @staticmethod
    def carried(line: bytes) -> list[dict[str, Any]]:
        """The protocol lines ``line`` of node 0's log holds: itself, or each line rank 0's
        ``relayed`` line carries, its bodies and its metric columns (signatures are not
        checked: this only counts)."""
        start = line.find(PREFIX.encode())
        if start == -1:
            return []
        body = line[start + len(PREFIX) : line.rfind(b" ")]
        try:
            fields = json.loads(body)
        except ValueError:
            return []
        if not isinstance(fields, dict):
            return []
        if fields.get("kind") != "relayed":
            return [fields]
        columns = fields.get("metrics") or {}
        metrics = [
            {"kind": "metric", "rank": rank, "t": t}
            for rank, t in zip(columns.get("rank", []), columns.get("t", []), strict=False)
        ]
        return [*fields.get("lines", []), *metrics]

    def tally(self) -> dict[str, Any]:
        self.stop.set()
        self.join()
        lags = self.lags or [float("nan")] * 2
        return {
            "log_lines": self.read,
            "log_metrics": self.metrics,
            "log_ranks": len(self.ranks),
            "log_errors": self.errors,
            "log_refused": self.refused,
            # while the kernel and the sidebar's server both follow: the middle of the run
            "streams_following": statistics.median(self.streams or [0]),
            "relay_p50": statistics.median(lags),
            "relay_p99": statistics.quantiles(lags, n=100)[98],
            **self.store_rates(),
        }

    def store_rates(self) -> dict[str, Any]:
        """The stand-in's store requests per second over the run: the median and peak of its
        5-second samples, rank 0's by operation in the median sample."""
        if not self.store:
            return {}
        samples = sorted(self.store, key=lambda s: s["rank0_per_s"])
        middle = samples[len(samples) // 2]
        return {
            "store_rank0_per_s": middle["rank0_per_s"],
            "store_rank0_peak": samples[-1]["rank0_per_s"],
            "store_rank0_by_op": middle["rank0_by_op"],
            "store_senders_per_s": statistics.median(s["senders_per_s"] for s in self.store),
        }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| nodes x 8 | ranks heard | load (1 min) | API requests | "
        "long-lived connections following (peak) / peak TCP | "
        "log follows | kernel / server CPU % of a core (kernel's metrics/s) | "
        "kernel RSS MiB | server RSS MiB | "
        "metric to monitor p50 / p99 s | sidebar JSON KiB (build ms) | failing rank named s | "
        "hung node named s | metric lines in node 0's log / heard by the kernel | "
        "metric to node 0's log p50 / p99 s | store requests/s: rank 0 median (peak) / senders |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        missed = f"not in {NAMED_WITHIN:.0f}"
        named = f"{r['fail_named_s']:.1f}" if "fail_named_s" in r else "-" if r["hang"] else missed
        hung = f"{r['hang_named_s']:.1f}" if "hang_named_s" in r else missed if r["hang"] else "-"
        shown = {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}[r.get("kind", "trainjob")]
        label = f"{r['nodes']} {shown}" + (f", node {r['nodes'] // 2} hung" if r["hang"] else "")
        if r.get("step_seconds", 1.0) != 1.0:
            label += f", {1 / r['step_seconds']:g} metrics/s a rank"
        lines.append(
            f"| {label} | {r['ranks_heard_end']} of {r['ranks']} | {r['load']:.1f} | "
            f"{r['requests']} | "
            f"{r['streams_following']:g} ({r['streams_peak']}) / {r['connections_peak']} | "
            f"{r['log_follows_peak']} | "
            f"{cpu_cell(r)} | "
            f"{r['kernel_rss_mib']:.0f} | {r['server_rss_mib']:.0f} | "
            f"{r['lag_p50']:.2f} / {r['lag_p99']:.2f} | {r['json_kib']:.0f} ({r['json_ms']:.0f}) | "
            f"{named} | {hung} | {r['log_metrics']} / {r['metrics_heard']} | "
            f"{r['relay_p50']:.2f} / {r['relay_p99']:.2f} | {store_cell(r)} |"
        )
    return "\n".join(lines)


def cpu_cell(row: dict[str, Any]) -> str:
    """The kernel's and the server's CPU, the metrics a second the kernel heard meanwhile,
    and a mark when a fault came inside the window (not steady training)."""
    fault = ", fault inside" if row.get("fault_in_window") else ""
    rate = f" ({row['window_metrics_per_s']:.0f}{fault})" if "window_metrics_per_s" in row else ""
    return f"{row['cpu_pct']:.1f} / {row['server_cpu_pct']:.0f}{rate}"


def store_cell(row: dict[str, Any]) -> str:
    if "store_rank0_per_s" not in row:
        return "-"
    rank0, peak = row["store_rank0_per_s"], row["store_rank0_peak"]
    return f"{rank0:.0f} ({peak:.0f}) / {row['store_senders_per_s']:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="64,256,1024")
    parser.add_argument("--fail-step", type=int, default=120)
    parser.add_argument("--hang", action="store_true", help="also a run hanging one node")
    parser.add_argument(
        "--step-seconds", type=float, default=1.0, help="each rank's seconds a step (a metric)"
    )
    parser.add_argument("--hang-only", action="store_true", help="only the run hanging one node")
    parser.add_argument(
        "--kinds", default="trainjob", help="job kinds to run, e.g. trainjob,pytorchjob"
    )
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--role", default="")
    args, rest = parser.parse_known_args()
    if args.role == "kernel":
        print(json.dumps(kernel(int(rest[0]), rest[1] == "1")))
        return 0
    if args.role == "server":
        print(json.dumps(server(float(rest[0]))))
        return 0
    load_at_start = os.getloadavg()[0]
    rows = []
    kinds = args.kinds.split(",")
    if unknown := sorted(set(kinds) - set(APIS)):
        parser.error(f"--kinds: {', '.join(unknown)} not one of {', '.join(APIS)}")
    for kind in kinds:
        for nodes in [int(n) for n in args.nodes.split(",")]:
            runs = (True,) if args.hang_only else (False, True) if args.hang else (False,)
            for hang in runs:
                rows.append(measure(nodes, hang, args.fail_step, kind, args.step_seconds))
                print(json.dumps(rows[-1]), flush=True)
    from results import machine, publish

    intro = (
        f"`python bench/scale.py --nodes {args.nodes}{' --hang' if args.hang else ''} "
        f"--kinds {args.kinds}"
        + (f" --step-seconds {args.step_seconds:g}" if args.step_seconds != 1.0 else "")
        + "`, "
        f"{time.strftime('%Y-%m-%d')}, {machine()}, 1-minute load average "
        f"{load_at_start:.1f} at the start; the stand-in plays every rank in one process "
        "beside the emulator, the kernel and the server, so each run loads the machine "
        "itself (the load column is the 1-minute load average at the end of each run). "
        + DESCRIPTION
    )
    publish(table(rows), "Scale" if args.write else None, intro)
    return 0


DESCRIPTION = (
    "A TrainJob (or PyTorchJob) of N nodes x 8 stand-in ranks (tests/scale_harness.py: every "
    "rank's lines signed with the job key, nodes other than 0 relaying through the real relay"
    " over a real c10d TCPStore, rank 0's real relay reader and hang watch; one process plays"
    " every node's ranks and the emulator serves one pod per node). Each rank reports one "
    "metric a second; ranks 517, 2051, 4000 (modulo the world) take 1.8x longer a step; one "
    "rank raises at the failing step. The kernel is a separate process following the job "
    "(`service.attach`); its CPU is measured over 20 s once every rank has reported, before "
    "the failing step or the hang (120 s in; a fault inside the window is marked with its "
    "row's CPU), with the metrics a second it heard in that window. The "
    "server is another process asking `JobManager.job` (the sidebar's job JSON) every 2 s "
    "(its CPU measured over those requests); it shows the job from the kernel's record once "
    "there is one. Long-lived connections: the median of per-second samples while both "
    "follow, and the peak (both processes start together here, before the first record). "
    "Metric to monitor: the time from a rank's `t` to the kernel's listener, which includes "
    "the relay's batching (0.3 s ticks) and the log stream. Failing rank named: from the "
    "rank's error line's `t` to `monitor.first_failure()` naming it; hung node named: from "
    "the last metric to `monitor.hang()` naming the node's ranks, with the hang watch set to "
    "10 s of silence. Every rank also sends resource samples as a real rank's sampler does "
    "(once a second up to 512 ranks, then ~512 a second job-wide). Store requests: the "
    "stand-in counts every request rank 0 (the relay's reader, the hang watch) and the "
    "nodes' senders make to the job's c10d store, in 5-second samples (median and peak over "
    "the run); its ranks share one sender per node, where a real job's ranks each send "
    "their own (the same lines, in up to 8 times as many batches)."
)

if __name__ == "__main__":
    sys.exit(main())
