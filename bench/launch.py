"""Launch benchmark: the same 2x2 DDP job started several ways, timed in one run.

Warm kernel, time to first step:

(a) raw ``torchrun``: two agents with c10d rendezvous on 127.0.0.1;
(b) Accelerate's ``notebook_launcher(num_processes=4)`` from a process that
    already imported torch and accelerate (as a notebook would have);
(c) ``%%distrain --nodes 2 --nproc 2 --wait`` executed in a real Jupyter kernel
    that already ran ``%load_ext jupyter_disttrain`` (warm launcher);
(d) the same cell with ``%distrain_config launch_mode=exec`` (fresh interpreters).

Brand-new kernel, until the first training cell is done (``bench/newkernel.py``):
(e) Accelerate: ``import torch, accelerate`` and ``notebook_launcher(train, 4)``;
(f) ``%load_ext jupyter_disttrain`` and the 2x2 cell, in a kernel of a running
    Jupyter server (the server's warm launcher);
(g) the same in a kernel without a server, no launcher running (the kernel
    starts one);
(h) the same in a kernel without a server, after an earlier kernel ended
    (its launcher lingers, ``DistrainMagics.linger``).

Each job trains a small MLP for 20 DDP steps on 4 ranks (gloo, CPU). Time to
first step is when rank 0 finishes its first optimizer step (written to a
file by the training code itself, identical in all); total is until the
launch returns. Every run has a time limit (``--limit``): a run that hangs is
killed, marked and left out of the medians; the table is written anyway. For
(c) the time to first step is broken down with the job's own start-up phases
(its events and signed lines) and marks of the training code.
``python bench/launch.py [--reps 5]`` prints the tables and rewrites the
"Launch" section of ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import platform
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from newkernel import (  # noqa: E402
    ALONE_BREAKDOWNS,
    KERNEL_CPU,
    LINGER_BREAKDOWNS,
    NEW_BREAKDOWNS,
    breakdown,
    new_kernel_runs,
)
from results import write_section  # noqa: E402

#: Seconds one run may take before it counts as hung (set by ``--limit``).
LIMIT = 180.0
#: A row starts once the 1-minute load average is below this (``--quiet-load``)...
QUIET_LOAD = 0.9
#: ...or after this many seconds of waiting for it (``--settle``; 0: start at once).
SETTLE = 150.0

TRAIN = textwrap.dedent(
    """
    import os, time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10)))
    if dist.get_rank() == 0:
        with open(os.environ["BENCH_MARK_FILE"], "a") as fh:
            fh.write(f"ddp {time.time()}\\n")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(20):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step == 0 and dist.get_rank() == 0:
            with open(os.environ["BENCH_MARK_FILE"], "a") as fh:
                fh.write(f"step {time.time()}\\n")
    """
)


class RunFailed(Exception):
    """A run that ended with an error: counted as failed, not in the medians."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mark_time(path: Path, what: str = "step") -> float:
    """When rank 0 wrote mark ``what`` (``ddp``: model built; ``step``: first step done)."""
    for line in path.read_text().splitlines():
        name, _, t = line.partition(" ")
        if name == what:
            return float(t)
    raise ValueError(f"no {what} mark in {path}")


def first_mark(path: Path) -> float:
    return mark_time(path, "step")


def run_torchrun(mark: Path) -> tuple[float, float]:
    """(a): two torchrun agents, as a user would type them."""
    script = mark.with_suffix(".py")
    script.write_text(TRAIN)
    port = free_port()
    env = {**os.environ, "BENCH_MARK_FILE": str(mark), "GLOO_SOCKET_IFNAME": "lo"}
    logs = [mark.with_suffix(f".node{node}.log") for node in range(2)]
    t0 = time.time()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--rdzv-id",
                "bench",
                "--rdzv-conf",
                f"is_host={int(node == 0)}",
                "--local-addr",
                "127.0.0.1",
                str(script),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=logs[node].open("wb"),
            start_new_session=True,  # its workers too are stopped with the agent's group
        )
        for node in range(2)
    ]
    try:
        codes = [p.wait(max(1.0, LIMIT - (time.time() - t0))) for p in procs]
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"torchrun agents still running after {LIMIT:.0f} s") from None
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # a hung run's agents and their workers
            p.wait()
    total = time.time() - t0
    if codes != [0, 0]:
        said = "; ".join(f"node {n}: {last_error(log)}" for n, log in enumerate(logs))
        raise RunFailed(f"torchrun agents exited with {codes} ({said})")
    return first_mark(mark) - t0, total


def last_error(log: Path) -> str:
    """The last line of a torchrun agent's stderr that names an error ("" none)."""
    lines = log.read_text(errors="replace").splitlines()
    errors = [line.strip() for line in lines if "Error" in line or "error" in line]
    return (errors or lines or [""])[-1][:300]


ACCELERATE_HOST = textwrap.dedent(
    """
    import os, sys, time
    import torch, accelerate
    from accelerate import notebook_launcher
    sys.stdin.readline()  # wait for "go"
    def train():
        exec(compile(open(os.environ["BENCH_TRAIN"]).read(), "train", "exec"), {})
    t0 = time.time()
    notebook_launcher(train, num_processes=4, use_port=os.environ["BENCH_PORT"])
    print(f"T0 {t0} END {time.time()}", flush=True)
    """
)


def run_notebook_launcher(mark: Path) -> tuple[float, float]:
    """(b): accelerate.notebook_launcher from a warm process."""
    script = mark.with_suffix(".py")
    script.write_text(TRAIN)
    env = {
        **os.environ,
        "BENCH_MARK_FILE": str(mark),
        "BENCH_TRAIN": str(script),
        "BENCH_PORT": str(free_port()),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", ACCELERATE_HOST],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    time.sleep(8)  # let it import torch and accelerate, as a notebook would have
    proc.stdin.write("go\n")
    proc.stdin.flush()
    timer = threading.Timer(LIMIT, proc.kill)  # a hung launch ends here
    timer.start()
    out = ""
    for line in proc.stdout:
        if line.startswith("T0 "):
            out = line
    timer.cancel()
    proc.wait()
    if not out:
        raise TimeoutError(f"notebook_launcher did not return within {LIMIT:.0f} s")
    parts = out.split()
    t0, end = float(parts[1]), float(parts[3])
    return first_mark(mark) - t0, end - t0


class Kernel:
    """A real Jupyter kernel with the extension loaded and its launcher warm."""

    def __init__(self, mode: str, home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DISTRAIN_WARM_LAUNCHER"}
        env["DISTRAIN_HOME"] = str(home)
        self.home = home
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env)
        self.execute("%load_ext jupyter_disttrain")
        self.execute(f"%distrain_config launch_mode={mode} live=none")
        if mode == "fork":
            self.execute(
                "from jupyter_disttrain.backends.local.launcher import shared_launcher\n"
                "shared_launcher().wait_ready()"
            )

    def execute(self, code: str, timeout: float = 600) -> dict[str, object]:
        msg_id = self.kc.execute(code)
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.km.interrupt_kernel()  # a hung job: stop it, mark the run
                raise TimeoutError(code) from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                raise RuntimeError("\n".join(msg["content"]["traceback"]))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return msg

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


BREAKDOWNS: list[dict[str, float]] = []


def distrain_runner(kernel: Kernel, parts: bool) -> Callable[[Path], tuple[float, float]]:
    def run(mark: Path) -> tuple[float, float]:
        kernel.execute(f"import os; os.environ['BENCH_MARK_FILE'] = {str(mark)!r}")
        name = mark.stem
        t0 = time.time()
        kernel.execute(f"%%distrain --nodes 2 --nproc 2 --wait --name {name}\n" + TRAIN, LIMIT)
        end = time.time()
        if parts:
            parts_of = breakdown(kernel.home / "jobs" / name, t0, mark)
            parts_of["after the first step: 19 steps, exit, result to the cell"] = end - first_mark(
                mark
            )
            BREAKDOWNS.append(parts_of)
        return first_mark(mark) - t0, end - t0

    return run


def measure(
    name: str, run: Callable[[Path], tuple[float, float]], reps: int, work: Path
) -> dict[str, float]:
    """Medians of the runs that finished; ``hung`` counts those past the time limit,
    ``failed`` those that ended with an error; ``load`` is the 1-minute load average when
    the row started."""
    settle(QUIET_LOAD, SETTLE)
    load = os.getloadavg()[0]
    print(f"  {name}: {load_now()}", flush=True)
    firsts, totals, hung, failed = [], [], 0, 0
    for i in range(reps):
        mark = work / f"{name.split()[0]}-{i}.mark"
        try:
            first, total = run(mark)
        except TimeoutError as exc:
            hung += 1
            print(f"  {name} #{i + 1}: HUNG, stopped after {LIMIT:.0f} s ({exc})", flush=True)
            continue
        except RunFailed as exc:
            failed += 1
            print(f"  {name} #{i + 1}: FAILED ({exc})", flush=True)
            continue
        firsts.append(first)
        totals.append(total)
        print(f"  {name} #{i + 1}: first step {first:.2f} s, total {total:.2f} s", flush=True)
    nan = float("nan")
    return {
        "first": statistics.median(firsts) if firsts else nan,
        "total": statistics.median(totals) if totals else nan,
        "hung": hung,
        "failed": failed,
        "load": load,
    }


def measure_new(name: str, run: Callable[[int], dict[str, float]], reps: int) -> dict[str, float]:
    """Medians of a brand-new kernel's parts (``load_ext``, ``cell``) and their sum;
    ``load`` is the 1-minute load average when the row started."""
    settle(QUIET_LOAD, SETTLE)
    load = os.getloadavg()[0]
    print(f"  {name}: {load_now()}", flush=True)
    got: list[dict[str, float]] = []
    hung = 0
    for i in range(reps):
        try:
            parts = run(i)
        except TimeoutError as exc:
            hung += 1
            print(f"  {name} #{i + 1}: HUNG, stopped after {LIMIT:.0f} s ({exc})", flush=True)
            continue
        parts["total"] = sum(parts.values())
        got.append(parts)
        print(
            f"  {name} #{i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()),
            flush=True,
        )
    out: dict[str, float] = {"hung": hung, "load": load}
    for key in ("load_ext", "cell", "total"):
        values = [p[key] for p in got if key in p]
        out[key] = statistics.median(values) if values else float("nan")
    return out


def _hung(r: dict[str, float]) -> str:
    """What went wrong in a row's runs, for its label: "(1 hung)", "(1 hung, 1 failed)"."""
    said = [f"{int(r[what])} {what}" for what in ("hung", "failed") if r.get(what)]
    return f" ({', '.join(said)})" if said else ""


def settle(quiet: float, longest: float) -> None:
    """Wait until the 1-minute load average is below ``quiet`` (at most ``longest`` s), so a
    row does not start under the load the previous row left; says how long it waited."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= quiet and time.monotonic() - t0 < longest:
        time.sleep(2.0)
    print(f"  settled {time.monotonic() - t0:.0f} s: {load_now()}", flush=True)


def load_now() -> str:
    """The machine's load averages and the busiest other processes, for the record."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def main() -> int:
    global LIMIT, QUIET_LOAD, SETTLE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--new-reps", type=int, default=4, help="runs of each new-kernel row")
    parser.add_argument("--limit", type=float, default=LIMIT, help="seconds before a run is hung")
    parser.add_argument("--only", default="abcdefgh", help="rows to run, e.g. 'bc' or 'efgh'")
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument(
        "--quiet-load", type=float, default=QUIET_LOAD, help="start a row below this load"
    )
    parser.add_argument(
        "--settle", type=float, default=SETTLE, help="most seconds to wait for --quiet-load"
    )
    args = parser.parse_args()
    LIMIT, QUIET_LOAD, SETTLE = args.limit, args.quiet_load, args.settle
    work = Path(tempfile.mkdtemp(prefix="distrain-bench-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # the runs' scripts and job homes
    scratch = work / "tmp"  # every run's temporary files (torchelastic's log folders) go too
    scratch.mkdir()
    os.environ["TMPDIR"] = str(scratch)
    loads = [load_now()]
    results: dict[str, dict[str, float]] = {}
    if "a" in args.only:
        print("(a) raw torchrun, 2 agents x 2")
        results["(a) raw torchrun 2x2"] = measure("torchrun", run_torchrun, args.reps, work)
    if "b" in args.only:
        print("(b) accelerate notebook_launcher(num_processes=4)")
        results["(b) notebook_launcher, 4 procs"] = measure(
            "accelerate", run_notebook_launcher, args.reps, work
        )
    for row, label, mode in (
        ("c", "(c) %%distrain 2x2 (fork, default)", "fork"),
        ("d", "(d) %%distrain 2x2 (exec)", "exec"),
    ):
        if row not in args.only:
            continue
        print(label)
        kernel = Kernel(mode, work / f"home-{mode}")
        try:
            results[label] = measure(
                f"distrain-{mode}", distrain_runner(kernel, mode == "fork"), args.reps, work
            )
        finally:
            kernel.close()
    loads.append(load_now())
    new: dict[str, dict[str, float]] = {}
    if set("efgh") & set(args.only):
        runs, close = new_kernel_runs(TRAIN, dict(os.environ), work, LIMIT)
        try:
            for label, run in runs.items():
                if label[1] in args.only:
                    print(label)
                    new[label] = measure_new(label, run, args.new_reps)
        finally:
            close()
    loads.append(load_now())
    tables = [
        warm_table(results),
        new_table(new),
        kernel_cpu_table(KERNEL_CPU),
        parts_table("(c) warm 2x2", BREAKDOWNS),
        parts_table("(f) brand-new kernel of a Jupyter server", NEW_BREAKDOWNS),
        parts_table("(g) brand-new kernel without a server, no launcher", ALONE_BREAKDOWNS),
        parts_table("(h) brand-new kernel without a server, launcher lingering", LINGER_BREAKDOWNS),
    ]
    text = "\n\n".join(t for t in tables if t)
    print("\n" + text)
    if not args.no_write:
        body = (
            f"`python bench/launch.py --reps {args.reps} --new-reps {args.new_reps}` on "
            f"{os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M')}; the machine is shared: {'; '.join(loads)} "
            "(start, after the warm rows, end). 4 ranks, 20 DDP steps of a 64-128-10 MLP, "
            "gloo on CPU. Warm rows: (b) and (c)/(d) are timed from a process that has already "
            "imported torch (a notebook kernel); (a) pays everything. A run that takes longer "
            f"than {LIMIT:.0f} s is stopped and counted as hung, not in the medians; an agent "
            "that exits with an error is counted failed. Each row starts once the 1-minute "
            f"load average is below {QUIET_LOAD:g} (waiting at most {SETTLE:.0f} s): its "
            "load at start is in its row.\n\n" + text
        )
        write_section(ROOT / "BENCHMARKS.md", "Launch", body)
    return 0


def warm_table(results: dict[str, dict[str, float]]) -> str:
    if not results:
        return ""
    base = results.get("(b) notebook_launcher, 4 procs", {}).get("first", float("nan"))
    rows = [
        "| launch (warm kernel) | first step (median s) | total (median s) | first step vs (b) "
        "| load at start |",
        "|---|---|---|---|---|",
    ]
    for label, r in results.items():
        rows.append(
            f"| {label}{_hung(r)} | {r['first']:.2f} | {r['total']:.2f} | "
            f"{r['first'] / base:.2f}x | {r['load']:.1f} |"
        )
    return "\n".join(rows)


def new_table(new: dict[str, dict[str, float]]) -> str:
    if not new:
        return ""
    base = new.get("(e) Accelerate notebook_launcher(4)", {}).get("total", float("nan"))
    rows = [
        "| brand-new kernel -> first 2x2 cell done | `%load_ext` (median s) | "
        "first cell (median s) | total (median s) | vs (e) | load at start |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in new.items():
        load = "-" if r["load_ext"] != r["load_ext"] else f"{r['load_ext']:.2f}"
        rows.append(
            f"| {label}{_hung(r)} | {load} | {r['cell']:.2f} | {r['total']:.2f} | "
            f"{r['total'] / base:.2f}x | {r['load']:.1f} |"
        )
    return "\n".join(rows)


def kernel_cpu_table(cpu: dict[str, list[dict[str, float]]]) -> str:
    """The kernel's own CPU seconds in the brand-new-kernel rows (medians): unlike wall
    time, they do not grow with the machine's load."""
    if not cpu:
        return ""
    rows = [
        "| brand-new kernel, the kernel's own CPU (median s) | `%load_ext` | first cell "
        "| torch imported in the kernel |",
        "|---|---|---|---|",
    ]
    for row, runs in sorted(cpu.items()):
        load = statistics.median(r["load_ext"] for r in runs)
        cell = statistics.median(r["cell"] for r in runs)
        torch = f"{int(sum(r['torch'] for r in runs))} of {len(runs)} runs"
        rows.append(f"| ({row}) | {load:.2f} | {cell:.2f} | {torch} |")
    return "\n".join(rows)


def parts_table(row: str, breakdowns: list[dict[str, float]]) -> str:
    """Where the time of ``row``'s runs went: the median of each part."""
    if not breakdowns:
        return ""
    rows = [f"| {row}, where the time goes (median of the runs) | s |", "|---|---|"]
    total = 0.0
    for key in breakdowns[0]:
        value = statistics.median(b[key] for b in breakdowns)
        rows.append(f"| {key} | {value:.2f} |")
        if not key.startswith("after"):
            total += value
    rows.append(f"| = time to first step (sum of the medians) | {total:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
