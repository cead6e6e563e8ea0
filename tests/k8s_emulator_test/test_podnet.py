"""Pods on the emulator's pod network: own addresses, same ports, names, mounts, clean-up."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.stream import portforward

from tests.k8s_emulator import Emulator, podnet

T = TypeVar("T")

pytestmark = pytest.mark.skipif(
    podnet.availability() is not None, reason=f"no pod network: {podnet.availability()}"
)

# Listens on 0.0.0.0:7000, answers its own name to whoever connects, then (when PEER is set)
# connects to the peer by its DNS name on the same port and prints what it answered.
SERVE = """
import os, socket, sys, threading, time, json
me = os.environ["HOSTNAME"]
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(os.environ["PORT"]))); srv.listen(8)
def serve():
    while True:
        conn, _ = srv.accept(); conn.sendall(me.encode()); conn.close()
threading.Thread(target=serve, daemon=True).start()
peer = None
for _ in range(200):
    try:
        with socket.create_connection((os.environ["PEER"], int(os.environ["PORT"])), 2) as c:
            peer = c.recv(100).decode(); break
    except OSError:
        time.sleep(0.1)
eth0 = socket.gethostbyname(socket.gethostname())
mounted = " /data " in open("/proc/self/mountinfo").read()
print(json.dumps({"peer": peer, "env": dict(os.environ), "eth0": eth0,
                  "data_mounted": mounted, "cwd": os.getcwd()}), flush=True)
time.sleep(600)
"""


def wait(check: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(network="pods") as emulator:
        yield emulator


def node_pod(name: str, host: str, peer: str) -> dict[str, Any]:
    env = {"PORT": "7000", "PEER": f"{peer}.job", "MODE": "$(PORT)-x"}
    return {
        "metadata": {"name": name, "labels": {"app": "job"}},
        "spec": {
            "hostname": host,
            "subdomain": "job",
            "restartPolicy": "Never",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {
                    "name": "node",
                    "image": "python:3.11",
                    "command": ["python", "-c", SERVE],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "ports": [{"containerPort": 7000}],
                    "workingDir": "/workspace/run",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
        },
    }


def first_line(emu: Emulator, name: str) -> dict[str, Any] | None:
    try:
        text = emu.pod_log(name)
    except Exception:
        return None
    return json.loads(text.splitlines()[0]) if text.strip() else None


def test_two_pods_listen_on_one_port_at_their_own_addresses(emu: Emulator) -> None:
    core = client.CoreV1Api(emu.api_client())
    service = {
        "metadata": {"name": "job"},
        "spec": {"clusterIP": "None", "selector": {"app": "job"}},
    }
    core.create_namespaced_service("default", service)
    core.create_namespaced_pod("default", node_pod("a", "job-0", "job-1"))
    core.create_namespaced_pod("default", node_pod("b", "job-1", "job-0"))
    seen = {n: wait(functools.partial(first_line, emu, n), f"pod {n}'s report") for n in "ab"}
    pods = {n: core.read_namespaced_pod(n, "default") for n in ("a", "b")}
    ips = {n: pods[n].status.pod_ip for n in pods}
    assert ips["a"] != ips["b"] and all(ip.startswith("10.244.") for ip in ips.values()), ips
    # each reached the other by its DNS name, on the same port, and got the other's answer
    assert (seen["a"]["peer"], seen["b"]["peer"]) == ("job-1", "job-0"), seen
    assert {n: seen[n]["eth0"] for n in seen} == ips  # its own name resolves to its pod IP
    for name in ("a", "b"):  # the manifest's environment as it is, $(VAR) expanded
        declared = {e.name: e.value for e in pods[name].spec.containers[0].env}
        declared["MODE"] = "7000-x"
        assert {k: seen[name]["env"][k] for k in declared} == declared
        assert seen[name]["data_mounted"] and seen[name]["cwd"] == "/workspace/run"
    assert not os.path.exists("/workspace/run")  # made inside the pod's root, not the host's
    # port-forward reaches each pod's own socket on the one port
    for name, host in (("a", "job-0"), ("b", "job-1")):
        forward = portforward(
            core.connect_get_namespaced_pod_portforward, name, "default", ports="7000"
        )
        sock = forward.socket(7000)
        sock.settimeout(10)
        assert sock.recv(100) == host.encode()
        sock.close()
        forward.close()


def test_namespaces_are_removed_with_pods_and_emulator() -> None:
    with Emulator(network="pods") as emulator:
        assert emulator.podnet is not None
        prefix = emulator.podnet.prefix
        core = client.CoreV1Api(emulator.api_client())
        pod = {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x", "command": ["sleep", "600"]}]},
        }
        core.create_namespaced_pod("default", pod)
        wait(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running", "running")
        assert len(podnet.leftovers(prefix)) == 2  # the node's and the pod's
        core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
        wait(lambda: podnet.leftovers(prefix) == [f"{prefix}-node"], "the pod's namespace gone")
        core.create_namespaced_pod("default", pod)
        wait(lambda: core.read_namespaced_pod("p", "default").status.phase == "Running", "again")
    assert podnet.leftovers(prefix) == []


def test_host_network_pod_shares_the_host_namespace(emu: Emulator) -> None:
    core = client.CoreV1Api(emu.api_client())
    script = "import socket; print(socket.if_nameindex())"
    pod = {
        "metadata": {"name": "h"},
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "command": ["python", "-c", script]}],
        },
    }
    core.create_namespaced_pod("default", pod)
    wait(lambda: core.read_namespaced_pod("h", "default").status.phase == "Succeeded", "done")
    assert core.read_namespaced_pod("h", "default").status.pod_ip == "127.0.0.1"
    host = sorted(name for _, name in __import__("socket").if_nameindex())
    assert sorted(n for _, n in eval(emu.pod_log("h"))) == host


def test_loopback_fallback_is_announced_once() -> None:
    code = (
        "from tests.k8s_emulator import Emulator\n"
        "for _ in range(2):\n"
        "    with Emulator() as emu:\n"
        "        print(emu.network_mode, emu.podnet)\n"
    )
    env = {**os.environ, "K8S_EMULATOR_NETWORK": "loopback"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split("\n")[:2] == ["loopback None", "loopback None"], done.stderr
    assert done.stderr.count("pods share this host's loopback") == 1, done.stderr
    with pytest.raises(ValueError, match="choose 'auto', 'pods' or 'loopback'"):
        podnet.choose("bridge")
