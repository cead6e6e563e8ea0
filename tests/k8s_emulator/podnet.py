"""The pod network: each pod in its own network namespace on a bridge, as a CNI plugin makes it.

Every emulator gets a *node* namespace of its own (``<prefix>-node``) holding
the bridge ``cni0``; each pod gets a namespace (``<prefix>-<n>``) with ``lo``
and ``eth0``, one end of a veth pair whose other end is on the bridge, and an
address from the emulator's ``10.244.<k>.0/24`` (``k`` differs between the
emulators of one machine, so two pytest-xdist workers never share a subnet;
each also has its own bridge in its own namespace). Nothing is added to the
host's namespace: no interface, no address, no route. Deleting a pod's
namespace deletes its veth pair; :meth:`PodNetwork.close` deletes every
namespace the emulator made (and :class:`procs.Reaper` does when the
emulator's process dies).

:func:`availability` says whether this machine can do it (root, ``ip netns``,
``unshare``); where it cannot, the emulator runs pods on the host's loopback
(see :mod:`.rewrite`).
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
#: The pod CIDR; each emulator takes one /24 of it.
POD_CIDR = ipaddress.ip_network("10.244.0.0/16")
#: The last address of an emulator's /24: on the bridge, serving the emulator's own Services.
SERVICE_HOST = 254

T = TypeVar("T")
_checked: str | bool | None = False
_check_lock = threading.Lock()
_said = False


def _run(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def availability() -> str | None:
    """None when pods can have their own namespaces here, else the reason they cannot
    (checked once per process: a namespace is made and removed)."""
    global _checked
    with _check_lock:
        if _checked is not False:
            return _checked  # type: ignore[return-value]
        reason: str | None = None
        if os.environ.get("K8S_EMULATOR_NETWORK") == "loopback":
            reason = "K8S_EMULATOR_NETWORK=loopback"
        elif os.geteuid() != 0:
            reason = "not running as root (network and mount namespaces need CAP_SYS_ADMIN)"
        elif shutil.which("ip") is None:
            reason = "no `ip` command (iproute2)"
        else:
            name = f"k8s-probe-{os.getpid()}"
            try:
                _run("netns", "add", name)
                _run("netns", "del", name)
            except (OSError, subprocess.SubprocessError) as exc:
                reason = f"`ip netns add` failed: {getattr(exc, 'stderr', b'') or exc!r}"
        _checked = reason
        return reason


def pod_interface() -> str:
    """The interface a pod's traffic to other pods leaves by, for ``GLOO_SOCKET_IFNAME`` and
    ``NCCL_SOCKET_IFNAME`` in tests: ``eth0`` on the pod network, ``lo`` in the fallback."""
    return "eth0" if availability() is None else "lo"


def choose(network: str) -> str:
    """``"pods"`` or ``"loopback"`` for ``Emulator(network=...)``: ``"auto"`` is pods where
    :func:`availability` allows (else loopback, said once on stderr), ``"pods"`` requires it."""
    if network not in ("auto", "pods", "loopback"):
        raise ValueError(f"network={network!r}: choose 'auto', 'pods' or 'loopback'")
    if network == "loopback":
        return network
    reason = availability()
    if reason is None:
        return "pods"
    if network == "pods":
        raise RuntimeError(f"pods cannot have network namespaces here: {reason}")
    global _said
    if not _said:
        _said = True
        print(f"k8s emulator: pods share this host's loopback ({reason})", file=sys.stderr)
    return "loopback"


def in_namespace(path: str, action: Callable[[], T]) -> T:
    """``action()`` run on a thread that entered the network namespace at ``path``: a socket
    it makes belongs to that namespace for good (the calling thread's namespace is unchanged)."""
    result: list[T] = []
    error: list[BaseException] = []

    def enter() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({path}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append(action())
        except BaseException as exc:  # handed to the caller
            error.append(exc)

    thread = threading.Thread(target=enter, name="netns-enter", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


class PodNetwork:
    """One emulator's bridge, pod namespaces and addresses."""

    def __init__(self, emulator_id: str) -> None:
        self.prefix = f"k8s{emulator_id[:8]}"
        index = zlib.crc32(f"{emulator_id}{os.getpid()}".encode()) % 250 + 1
        self.subnet = ipaddress.ip_network(f"10.244.{index}.0/24")
        self.node_ns = f"{self.prefix}-node"
        self.service_ip = str(self.subnet[SERVICE_HOST])
        self._lock = threading.Lock()
        self._free = list(range(2, SERVICE_HOST))
        self._pods: dict[str, tuple[str, str]] = {}  # key -> (namespace name, address)
        self._count = 0
        self._started = False

    def start(self) -> None:
        """Make the node namespace and its bridge (with the Service address)."""
        _run("netns", "add", self.node_ns)
        self._started = True
        node = ("-n", self.node_ns)
        _run(*node, "link", "set", "lo", "up")
        _run(*node, "link", "add", "cni0", "type", "bridge")
        _run(*node, "addr", "add", f"{self.service_ip}/{self.subnet.prefixlen}", "dev", "cni0")
        _run(*node, "link", "set", "cni0", "up")

    @staticmethod
    def path(namespace: str) -> str:
        return f"{NETNS_DIR}/{namespace}"

    def address(self, key: str) -> str | None:
        with self._lock:
            entry = self._pods.get(key)
        return entry[1] if entry else None

    def namespace(self, key: str) -> str | None:
        with self._lock:
            entry = self._pods.get(key)
        return entry[0] if entry else None

    def attach(self, key: str) -> tuple[str, str]:
        """A namespace and address for pod ``key`` (its uid), wired to the bridge."""
        with self._lock:
            if key in self._pods:
                return self._pods[key]
            if not self._free:
                raise RuntimeError(f"pod network {self.subnet} is full")
            host = self._free.pop(0)
            self._count += 1
            name = f"{self.prefix}-{self._count}"
            self._pods[key] = (name, str(self.subnet[host]))
            address = self._pods[key][1]
        peer = f"veth{self._count}"
        _run("netns", "add", name)
        _run(
            "-n",
            self.node_ns,
            "link",
            "add",
            peer,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            name,
        )
        _run("-n", self.node_ns, "link", "set", peer, "master", "cni0", "up")
        _run("-n", name, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        _run("-n", name, "link", "set", "eth0", "up")
        _run("-n", name, "link", "set", "lo", "up")
        return name, address

    def detach(self, key: str) -> None:
        """Delete pod ``key``'s namespace (and so its veth pair); its address is free again."""
        with self._lock:
            entry = self._pods.pop(key, None)
        if entry is None:
            return
        subprocess.run(["ip", "netns", "del", entry[0]], capture_output=True, timeout=30)
        with self._lock:
            self._free.append(int(ipaddress.ip_address(entry[1])) - int(self.subnet[0]))

    def set_link(self, key: str, up: bool) -> None:
        """Take pod ``key``'s ``eth0`` down or up (a fault)."""
        name = self.namespace(key)
        if name is not None:
            _run("-n", name, "link", "set", "eth0", "up" if up else "down")

    def close(self) -> None:
        """Delete every namespace this emulator made."""
        with self._lock:
            keys = list(self._pods)
        for key in keys:
            self.detach(key)
        if self._started:
            subprocess.run(["ip", "netns", "del", self.node_ns], capture_output=True, timeout=30)
            self._started = False

    def connect(self, key: str | None, host: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection to ``host:port`` made inside pod ``key``'s namespace (None: the
        node's, as a client on the pod network such as Prometheus)."""
        name = self.namespace(key) if key else self.node_ns
        if name is None:
            raise ConnectionError(f"pod {key} has no network namespace")

        def dial() -> socket.socket:
            return socket.create_connection((host, port), timeout=timeout)

        return in_namespace(self.path(name), dial)

    def listen(self, port: int) -> socket.socket:
        """A listening socket on the Service address in the node namespace."""

        def bind() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.service_ip, port))
            return sock

        return in_namespace(self.path(self.node_ns), bind)


class Relay:
    """A TCP relay from the node namespace's Service address to a port on this host's
    loopback: how a pod reaches a service the tests run on this host (an object store
    standing for one outside the cluster), at ``address``."""

    def __init__(self, network: PodNetwork, port: int) -> None:
        self.port = port
        self._server = network.listen(port)
        self._server.listen(16)
        self.address = f"{network.service_ip}:{port}"
        self._closed = False
        threading.Thread(target=self._accept, name=f"relay-{port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                inside, _ = self._server.accept()
                outside = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError:
                continue
            outside.settimeout(None)
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._server.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        source.close()
        target.close()


def leftovers(prefix: str) -> list[str]:
    """Network namespaces whose name starts with ``prefix`` (for clean-up checks)."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def remove_all(prefix: str) -> None:
    """Delete every network namespace named ``prefix...`` (the watchdog's clean-up)."""
    for name in leftovers(prefix):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
