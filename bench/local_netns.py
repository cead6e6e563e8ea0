"""What ``--network isolated`` costs a local job: its network's set-up and removal.

Makes and removes a job's network (``backends/local/netns.py``: the lease,
the bridge's namespace, one namespace, veth pair, address and hosts file per
node) ``--runs`` times for 2, 4 and 8 nodes, as a job's submission and end
do, and checks nothing is left each time. Needs root. ``python
bench/local_netns.py`` prints a table and rewrites the "Local backend:
isolated network" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results import machine, write_section  # noqa: E402
from jupyter_disttrain.backends.local import netns  # noqa: E402


def measure(nodes: int, runs: int) -> tuple[list[float], list[float]]:
    """Seconds to make and to remove a network of ``nodes`` nodes, ``runs`` times."""
    made, removed = [], []
    for _ in range(runs):
        run_id = os.urandom(6).hex()
        began = time.perf_counter()
        hostnames = tuple(f"bench-node-{n}" for n in range(nodes))
        net = netns.reserve(run_id, hostnames, os.getpid())
        netns.claim(net)
        netns.setup(net)
        up = time.perf_counter()
        netns.teardown(net)
        made.append(up - began)
        removed.append(time.perf_counter() - up)
        left = netns.leftovers(run_id)
        if left:
            raise SystemExit(f"left behind: {left}")
    return made, removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    rows = []
    for nodes in (2, 4, 8):
        made, removed = measure(nodes, args.runs)
        med = statistics.median(made)
        rows.append(
            f"| {nodes} | {med * 1000:.0f} | {med / nodes * 1000:.0f} | {max(made) * 1000:.0f} "
            f"| {statistics.median(removed) * 1000:.0f} |"
        )
    body = "\n".join(
        [
            f"`python bench/local_netns.py --runs {args.runs}` on {machine()}, {date.today()}: "
            "a job's network made (lease, bridge namespace, per node a namespace, veth pair, "
            "address and hosts file: seven `ip` commands a node) and removed, as a job's "
            "start and end do (other tests shared the 2 CPUs). Isolated jobs also start "
            "fresh interpreters instead of forking from the warm launcher (see Launch).",
            "",
            "| nodes | set-up median ms | per node ms | set-up max ms | removal median ms |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(body)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", "Local backend: isolated network", body)


if __name__ == "__main__":
    main()
