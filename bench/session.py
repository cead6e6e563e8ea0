"""Session benchmark: a warm 20-step DDP cell on 4 ranks, three ways, in one Jupyter kernel.

(a) ``%%distrain --session`` on a ``%distrain_session`` of 2 nodes x 2 processes
    (torchrun agents, c10d rendezvous, gloo), the model built by an earlier cell;
(b) ipyparallel ``%%px`` on 4 engines, each in one gloo process group, the
    model built by an earlier ``%%px`` cell;
(c) a cold ``%%distrain --nodes 2 --nproc 2 --wait`` (warm launcher): processes,
    rendezvous, process group and model every time.

Every cell trains the same 64-128-10 MLP for 20 DDP steps (batch 32, SGD) on
every rank; (a) and (b) alternate, so both see the same machine load. A
cell's time is from the kernel's ``execute_request`` to its ``idle`` status,
read by the client, the same way for all three.
``python bench/session.py [--reps 20]`` prints the medians and rewrites the
"Sessions" section of ``BENCHMARKS.md``. Needs the ``bench`` extra (ipyparallel).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from launch import Kernel  # noqa: E402
from results import write_section  # noqa: E402

BUILD = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(dist.get_rank())
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    """
)
STEPS = textwrap.dedent(
    """
    for step in range(20):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    """
)
IPP_START = textwrap.dedent(
    """
    import os, ipyparallel as ipp
    os.environ.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cluster = ipp.Cluster(n=4, log_level=40)
    rc = cluster.start_and_connect_sync()
    rc.wait_for_engines(4, timeout=120)
    for i, engine in enumerate(rc):
        engine["rank"] = i
    view = rc[:]
    view.block = True  # %%px waits for every engine, as a %%distrain cell does
    view.activate()
    """
)
IPP_GROUP = (
    "%%px\nimport torch.distributed as dist\n"
    'dist.init_process_group("gloo", rank=rank, world_size=4, init_method="tcp://127.0.0.1:{port}")'
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(kernel: Kernel, code: str, reps: int, label: str) -> list[float]:
    """Seconds from execute to idle for ``code``, ``reps`` times."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        kernel.execute(code)
        out.append(time.perf_counter() - t0)
        print(f"  {label}: {out[-1]:.3f} s", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="warm cells per way (cold: a quarter)")
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    kernel = Kernel("fork")
    session = "%%distrain --session bench\n"
    warm = {
        "(a) %%distrain --session (2x2, warm)": session + STEPS,
        "(b) ipyparallel %%px (4 engines, warm)": "%%px\n" + STEPS,
    }
    results: dict[str, list[float]] = {label: [] for label in warm}
    try:
        print("set-up: a 2x2 session and 4 ipyparallel engines, each building the model")
        kernel.execute("%distrain_session start bench --nodes 2 --nproc 2")
        kernel.execute(session + BUILD)
        kernel.execute(IPP_START)
        kernel.execute(IPP_GROUP.format(port=free_port()))
        kernel.execute("%%px\n" + BUILD)
        for code in warm.values():
            kernel.execute(code)  # the first step's lazy imports
        for i in range(args.reps):  # interleaved: both ways see the same machine load
            for label, code in warm.items():
                results[label] += timed(kernel, code, 1, f"{label.split()[0]} #{i + 1}")
        kernel.execute("%distrain_session stop bench")
        kernel.execute("cluster.stop_cluster_sync()")
        print("(c) cold %%distrain --nodes 2 --nproc 2 --wait")
        cold = "%%distrain --nodes 2 --nproc 2 --wait\n" + BUILD + STEPS
        results["(c) %%distrain (2x2, cold)"] = timed(kernel, cold, max(3, args.reps // 4), "cold")
    finally:
        kernel.close()
    rows = ["| way | median (s) | min (s) | max (s) | cells |", "|---|---|---|---|---|"]
    for label, times in results.items():
        rows.append(
            f"| {label} | {statistics.median(times):.3f} | {min(times):.3f} | "
            f"{max(times):.3f} | {len(times)} |"
        )
    table = "\n".join(rows)
    print("\n" + table)
    if not args.no_write:
        load = os.getloadavg()[0]
        body = (
            f"`python bench/session.py --reps {args.reps}` on {os.cpu_count()} cores (load "
            f"average {load:.1f} when it ended), Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d')}. One Jupyter kernel; each cell trains a 64-128-10 MLP "
            "for 20 DDP steps on 4 ranks (gloo, CPU), timed from execute request to idle. "
            "(a) and (b) run on ranks that built the model in an earlier cell; (c) starts "
            "processes, rendezvous and process group every time.\n\n" + table
        )
        write_section(ROOT / "BENCHMARKS.md", "Sessions", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
