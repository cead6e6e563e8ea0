"""JAX launch benchmark: the same 2x2 JAX training script started two ways, timed in one run.

(a) plain ``python -m``: four processes (``JAX_COORDINATOR_ADDRESS``,
    ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` set, as a launcher script or
    Kubeflow Trainer's ``jax-distributed`` runtime sets them), each calling
    ``jax.distributed.initialize(...)`` with them itself;
(b) ``%%distrain --framework jax --nodes 2 --nproc 2 --wait`` executed in a
    real Jupyter kernel that already ran ``%load_ext jupyter_disttrain``
    (the processes are fresh interpreters: JAX is not fork-safe).

Each job trains a 64-128-10 MLP data-parallel for 20 ``jax.jit`` steps over the
global mesh of 4 CPU devices. Time to first step is when process 0 has the
first step's loss (written to a file by the training code itself, identical
in both); total is until the launch returns. ``python bench/jax_launch.py
[--reps 5]`` prints a table and rewrites the "JAX launch" section of
``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from launch import Kernel, first_mark, free_port  # noqa: E402
from results import write_section  # noqa: E402

MODULE = "jaxbench_train"
TRAIN = textwrap.dedent(
    """
    import os, time
    import jax, numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    if not jax.distributed.is_initialized():  # as the jax-distributed runtime's env says
        jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"],
                                   int(os.environ["JAX_NUM_PROCESSES"]),
                                   int(os.environ["JAX_PROCESS_ID"]))
    rank = jax.process_index()
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    init, rng = np.random.default_rng(0), np.random.default_rng(rank)  # same params everywhere
    params = jax.device_put(
        [init.normal(size=(64, 128)).astype("float32") / 8, np.zeros(128, "float32"),
         init.normal(size=(128, 10)).astype("float32") / 11, np.zeros(10, "float32")],
        NamedSharding(mesh, P()))

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p[0] + p[1])
        return -(jax.nn.log_softmax(h @ p[2] + p[3]) * jax.nn.one_hot(y, 10)).sum(-1).mean()

    @jax.jit
    def step(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, g: a - 0.05 * g, p, grads), loss

    for i in range(20):
        x, y = (multihost_utils.host_local_array_to_global_array(a, mesh, P("data"))
                for a in (rng.normal(size=(32, 64)).astype("float32"),
                          rng.integers(0, 10, 32)))
        params, loss = step(params, x, y)
        if i == 0 and rank == 0:
            loss.block_until_ready()
            with open(os.environ["BENCH_MARK_FILE"], "a") as fh:
                fh.write(f"{time.time()}\\n")
    """
)


def run_plain(mark: Path) -> tuple[float, float]:
    """(a): four ``python -m`` processes, told their cluster by the environment."""
    (mark.parent / f"{MODULE}.py").write_text(TRAIN)
    port = free_port()
    base = {
        **os.environ,
        "BENCH_MARK_FILE": str(mark),
        "JAX_PLATFORMS": "cpu",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
        "JAX_NUM_PROCESSES": "4",
    }
    t0 = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", MODULE],
            cwd=mark.parent,
            env={**base, "JAX_PROCESS_ID": str(pid)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in range(4)
    ]
    codes = [p.wait(300) for p in procs]
    total = time.time() - t0
    assert codes == [0, 0, 0, 0], codes
    return first_mark(mark) - t0, total


def distrain_runner(kernel: Kernel) -> Callable[[Path], tuple[float, float]]:
    def run(mark: Path) -> tuple[float, float]:
        kernel.execute(f"import os; os.environ['BENCH_MARK_FILE'] = {str(mark)!r}")
        t0 = time.time()
        kernel.execute("%%distrain --framework jax --nodes 2 --nproc 2 --wait\n" + TRAIN)
        return first_mark(mark) - t0, time.time() - t0

    return run


def measure(
    name: str, run: Callable[[Path], tuple[float, float]], reps: int, work: Path
) -> dict[str, float]:
    firsts, totals = [], []
    for i in range(reps):
        mark = work / f"{name}-{i}.mark"
        first, total = run(mark)
        firsts.append(first)
        totals.append(total)
        print(f"  {name} #{i + 1}: first step {first:.2f} s, total {total:.2f} s", flush=True)
    return {"first": statistics.median(firsts), "total": statistics.median(totals)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="distrain-bench-jax-"))
    results: dict[str, dict[str, float]] = {}
    print("(a) plain python -m, 4 processes")
    results["(a) python -m x 4"] = measure("plain", run_plain, args.reps, work)
    print("(b) %%distrain --framework jax --nodes 2 --nproc 2")
    kernel = Kernel("fork")
    try:
        results["(b) %%distrain --framework jax 2x2"] = measure(
            "distrain", distrain_runner(kernel), args.reps, work
        )
    finally:
        kernel.close()
    base = results["(a) python -m x 4"]
    rows = [
        "| launch | first step (median s) | total (median s) | first step vs (a) |",
        "|---|---|---|---|",
    ]
    for label, r in results.items():
        rows.append(
            f"| {label} | {r['first']:.2f} | {r['total']:.2f} | {r['first'] / base['first']:.2f}x |"
        )
    table = "\n".join(rows)
    print("\n" + table)
    if not args.no_write:
        body = (
            f"`python bench/jax_launch.py --reps {args.reps}` on {os.cpu_count()} cores "
            f"(shared), Python {platform.python_version()}, jax "
            f"{_version('jax')}, {time.strftime('%Y-%m-%d')}. 4 JAX processes on CPU, 20 "
            "data-parallel `jax.jit` steps of a 64-128-10 MLP over the global mesh. Both start "
            "four fresh interpreters that import JAX; (b) is timed from the notebook kernel "
            "(payload, job directory, log tailing and the dashboard's monitor included).\n\n"
            + table
        )
        write_section(ROOT / "BENCHMARKS.md", "JAX launch", body)
    return 0


def _version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


if __name__ == "__main__":
    sys.exit(main())
