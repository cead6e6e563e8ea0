"""Debugger benchmark: what the feature costs a rank that never stops, and a stop's round trip.

(a) set-up: ``runtime.debugger.install()`` in fresh interpreters that imported
    torch.distributed, as a worker has: its time, and the threads, sockets and
    modules it adds (none until a rank stops);
(b) every later import passes the ``pdb`` finder on ``sys.meta_path``: the
    cost of a module lookup with and without it;
(c) a stopped rank: the time of one ``p`` command over the authenticated
    127.0.0.1 channel (in-process rank thread, real socket, job key);
(d) a cell run as a worker runs it (``cell.run_payload``) with no breakpoint
    from the Debugger panel, against the plain ``run_cell`` it wraps, and
    with one breakpoint set on a line the cell never reaches (then the cell's
    frames are traced, as pdb traces them).

``python bench/debugger.py`` prints the figures and rewrites the "Debugger"
section of ``BENCHMARKS.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from results import machine as machine_name  # noqa: E402
from results import write_section  # noqa: E402

SETUP = """
import json, os, sys, threading, time
import torch.distributed
from jupyter_disttrain.runtime import report  # a worker has it (and the package) already
before = (threading.active_count(), len(os.listdir("/proc/self/fd")), len(sys.modules))
t = time.perf_counter()
from jupyter_disttrain.runtime import debugger
debugger.install()
took = time.perf_counter() - t
after = (threading.active_count(), len(os.listdir("/proc/self/fd")), len(sys.modules))
print(json.dumps({"ms": took * 1000, "threads": after[0] - before[0],
                  "fds": after[1] - before[1], "modules": after[2] - before[2],
                  "pdb": "pdb" in sys.modules}))
"""


def setup_cost(runs: int = 5) -> dict[str, float]:
    """(a) median install time and what it adds, over ``runs`` fresh interpreters."""
    seen = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", SETUP], capture_output=True, text=True, check=True, cwd=ROOT
        )
        seen.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "ms": statistics.median(s["ms"] for s in seen),
        "threads": max(s["threads"] for s in seen),
        "fds": max(s["fds"] for s in seen),
        "modules": max(s["modules"] for s in seen),
        "pdb": any(s["pdb"] for s in seen),
    }


def finder_cost(n: int = 2_000) -> tuple[float, float]:
    """(b) microseconds per ``find_spec`` of a stdlib module without and with the finder."""
    import importlib.util

    from jupyter_disttrain.runtime import debugger

    def per_lookup() -> float:
        t = time.perf_counter()
        for _ in range(n):
            importlib.util.find_spec("no_such_module_here")  # every finder is asked
        return (time.perf_counter() - t) / n * 1e6

    without = per_lookup()
    patcher = debugger._PdbPatcher()
    sys.meta_path.insert(0, patcher)
    try:
        with_finder = per_lookup()
    finally:
        sys.meta_path.remove(patcher)
    return without, with_finder


def command_round_trip(n: int = 200) -> float:
    """(c) median milliseconds of ``p x`` to a stopped thread over the channel."""
    from jupyter_disttrain.runtime import debugger, debugwire, jobkey

    key = b"b" * 32
    with tempfile.NamedTemporaryFile(delete=False) as fh:
        fh.write(key)
    os.environ[jobkey.ENV_KEY_FILE] = fh.name
    debugger.install()
    devnull = open(os.devnull, "w")  # the rank thread's stdout

    def rank() -> None:
        sys.stdout = devnull
        x = 41
        breakpoint()
        x += 1

    threading.Thread(target=rank, daemon=True).start()
    while not debugger.paused():
        time.sleep(0.01)
    channel = debugger._channel
    assert channel is not None
    import socket

    sock = socket.create_connection(("127.0.0.1", channel.port))
    hello = debugwire.recv(sock, key, debugwire.HELLO_LIMIT)
    debugwire.send(sock, key, {"op": "hello", "nonce": hello["nonce"]})
    link = debugwire.Link(sock, key, str(hello["nonce"]), "notebook")
    times = []
    for _ in range(n):
        t = time.perf_counter()
        link.send({"op": "cmd", "line": "p x", "wait": 10})
        assert link.recv(1 << 20)["output"] == "41\n"
        times.append((time.perf_counter() - t) * 1000)
    link.send({"op": "cmd", "line": "c", "wait": 10})
    link.recv(1 << 20)
    sock.close()
    os.unlink(fh.name)
    return statistics.median(times)


LOOP_CELL = """
def f(a):
    return a * 2 + 1
total = 0
for i in range(200_000):
    total += f(i)
if total < 0:
    print("never")
"""


def cell_cost(runs: int = 11) -> dict[str, float]:
    """(d) median ms of :data:`LOOP_CELL` per way of running it (key set, as in a worker)."""
    from jupyter_disttrain.runtime import jobkey
    from jupyter_disttrain.runtime.cell import run_cell, run_payload

    with tempfile.NamedTemporaryFile(delete=False) as fh:
        fh.write(b"d" * 32)
    os.environ[jobkey.ENV_KEY_FILE] = fh.name
    ways = {
        "plain": lambda: run_cell(LOOP_CELL, {}),
        "none": lambda: run_payload({"source": LOOP_CELL, "breakpoints": []}, {}),
        "unreached": lambda: run_payload(
            {"source": LOOP_CELL, "breakpoints": [{"line": 8, "condition": None}]}, {}
        ),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(runs):  # interleaved, so a noisy neighbour hits every way alike
        for way, run in ways.items():
            t = time.perf_counter()
            run()
            times[way].append((time.perf_counter() - t) * 1000)
    os.unlink(fh.name)
    return {way: statistics.median(seen) for way, seen in times.items()}


def main() -> int:
    setup = setup_cost()
    without, with_finder = finder_cost()
    real = sys.stdout
    try:
        rtt = command_round_trip()
    finally:
        sys.stdout = real
    cell = cell_cost()
    extra = (cell["none"] / cell["plain"] - 1) * 100
    traced = cell["unreached"] / cell["plain"]
    body = f"""
Machine: {machine_name()}. `python bench/debugger.py`.

| what | figure |
|---|---|
| `debugger.install()` in a worker (median of 5 fresh interpreters) | {setup["ms"]:.3f} ms |
| threads / file descriptors it adds | {setup["threads"]} / {setup["fds"]} |
| modules it imports beyond its own (pdb loaded: {setup["pdb"]}) | {setup["modules"] - 1} |
| a module lookup without / with the pdb finder on `sys.meta_path` | \
{without:.2f} / {with_finder:.2f} µs |
| `p x` to a stopped rank over the signed 127.0.0.1 channel (median of 200) | {rtt:.2f} ms |
| a 200 000-call cell: plain `run_cell` / as a worker runs it, no breakpoint set \
(median of 11) | {cell["plain"]:.1f} / {cell["none"]:.1f} ms ({extra:+.1f} %) |
| the same cell with one Debugger-panel breakpoint on a line it never reaches | \
{cell["unreached"]:.1f} ms (x{traced:.1f}) |

A rank that never stops pays the set-up line above and nothing else: no
thread, no socket, no pdb import until `breakpoint()`. Without a breakpoint
from the Debugger panel nothing is traced (the difference is the machine's
noise); with one, the cell's frames are traced as pdb traces them, until the
cell returns.
"""
    print(body)
    write_section(ROOT / "BENCHMARKS.md", "Debugger", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
