"""What a pod on the emulator's pod network costs: sandbox set-up and container start.

Runs ``--pods`` pods (``true`` as the command, one at a time) on an emulator
with the pod network (``network="pods"``) and on one in the loopback fallback,
and reports per pod: the kubelet's sandbox set-up on the pod network (network
namespace, veth pair on the bridge, address, hosts and hostname files:
``kubelet.setup_times``), and the time from the pod's creation to its
container's end (``Succeeded`` seen by the client), which includes
``podexec``'s mount namespace, bind mounts and ``chroot``. ``python
bench/pod_network.py`` prints a table and rewrites the "Kubernetes emulator:
pod network" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from bench.results import machine, write_section  # noqa: E402
from tests.k8s_emulator import Emulator  # noqa: E402


def run(network: str, pods: int) -> tuple[list[float], list[float]]:
    """(sandbox set-up seconds, creation-to-Succeeded seconds) for each pod."""
    lifetimes = []
    with Emulator(network=network) as emu:
        core = client.CoreV1Api(emu.api_client())
        for index in range(pods):
            name = f"p{index}"
            body = {
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "command": ["true"]}],
                },
            }
            began = time.perf_counter()
            core.create_namespaced_pod("default", body)
            while core.read_namespaced_pod(name, "default").status.phase != "Succeeded":
                time.sleep(0.005)
            lifetimes.append(time.perf_counter() - began)
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        assert emu.kubelet is not None
        setups = list(emu.kubelet.setup_times)
    return setups, lifetimes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=20)
    args = parser.parse_args()
    setups, on_pods = run("pods", args.pods)
    _, on_loopback = run("loopback", args.pods)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.0f} | {max(values) * 1000:.0f}"

    rows = [
        f"| sandbox set-up on the pod network (netns, veth, address, hosts file) | {ms(setups)} |",
        f"| pod created to Succeeded, pod network (`true`) | {ms(on_pods)} |",
        f"| pod created to Succeeded, loopback fallback (`true`) | {ms(on_loopback)} |",
    ]
    body = (
        f"`python bench/pod_network.py --pods {args.pods}` on {machine()}, {date.today()}: "
        f"{args.pods} pods one after another, each running `true`. The set-up is the "
        "kubelet's part before the first container (six `ip` commands and two small files); "
        "the creation-to-Succeeded time adds `podexec` (a mount and UTS namespace, bind mounts "
        "of the host's top-level folders, `chroot`) and the API round trips.\n\n"
        "| step | median ms | max ms |\n|---|---|---|\n" + "\n".join(rows)
    )
    print(body)
    write_section(ROOT / "BENCHMARKS.md", "Kubernetes emulator: pod network", body)


if __name__ == "__main__":
    main()
