"""``--network isolated``: each node of a local job in its own network namespace, on a bridge.

A job's network is named after its run id (``DISTRAIN_RUN_ID``): the
namespace ``distrain-<run id>-br`` holds the bridge ``b<run id>`` and one
veth end ``v<run id>-<node>`` per node; node ``n`` runs in the namespace
``distrain-<run id>-<n>`` with ``lo`` and ``eth0`` (the other veth end) at
address ``n + 1`` of the job's own ``10.245.<k>.0/24`` (a /24 leased per
job under a lock in :data:`LEASES`, never the Kubernetes pod CIDR
10.244.0.0/16). Nothing is added to the host's namespace: no interface, no
address, no route. Each node's ``/etc/hosts`` (``/etc/netns/<namespace>/hosts``,
mounted by ``ip netns exec``) names every node of the job, as a cluster's DNS
does.

Removal: :func:`teardown` kills what still runs in the node namespaces,
deletes them (and so their veth pairs), the bridge's namespace, the hosts
files and the lease. A reaper process (this file run as a script, see
:func:`start_reaper`) holds a pipe from the job's owner and tears the
network down when the pipe closes: when the job ends, and when its kernel
dies however it dies. :func:`sweep` removes what a dead owner's lost reaper
left. Standard library only (the reaper imports nothing of the package).
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

#: The addresses isolated jobs take a /24 of (apart from the emulator's 10.244.0.0/16).
SUBNETS = ipaddress.IPv4Network("10.245.0.0/16")
NETNS_DIR = "/run/netns"
#: Per-namespace files ``ip netns exec`` mounts over ``/etc`` (the node's hosts file).
ETC_NETNS = "/etc/netns"
#: One lease file per /24 in use (``<k>``: the run id and the owner's pid), and the lock.
LEASES = "/run/jupyter_disttrain/networks"
PREFIX = "distrain-"
#: The interface every node has towards the others.
NODE_INTERFACE = "eth0"
#: After its owner ends, the reaper gives the node processes this long before killing them.
REAP_GRACE_SECONDS = 8.0
#: A planned network's addresses are kept this long for its job to start.
RESERVE_SECONDS = 600.0
CLONE_NEWNET = 0x40000000

T = TypeVar("T")


class IsolationError(RuntimeError):
    """The namespaces of ``--network isolated`` cannot be made here (the reason and the fix)."""


@dataclass(frozen=True)
class NodeNetwork:
    """A job's private network: its run id, its /24 and the host name of each node."""

    run_id: str
    subnet: str
    hostnames: tuple[str, ...]

    @property
    def bridge_namespace(self) -> str:
        return f"{PREFIX}{self.run_id}-br"

    @property
    def bridge(self) -> str:
        return f"b{self.run_id}"[:15]

    def namespace(self, node: int) -> str:
        """Node ``node``'s network namespace."""
        return f"{PREFIX}{self.run_id}-{node}"

    def veth(self, node: int) -> str:
        """The bridge's end of node ``node``'s veth pair (at most 15 characters)."""
        return f"v{self.run_id[:9]}-{node}"

    def address(self, node: int) -> str:
        """Node ``node``'s address on the job's network."""
        return str(ipaddress.ip_network(self.subnet)[node + 1])

    @property
    def namespaces(self) -> list[str]:
        """The node namespaces, then the bridge's."""
        nodes = [self.namespace(n) for n in range(len(self.hostnames))]
        return [*nodes, self.bridge_namespace]

    def prefix(self, node: int) -> tuple[str, ...]:
        """The command that starts a process of node ``node`` in its namespace and host name
        (``ip netns exec`` and :mod:`...runtime.nodehost`; both exec, the pid stays)."""
        from ...runtime import nodehost

        return (
            *("ip", "netns", "exec", self.namespace(node)),
            *(sys.executable, "-I", nodehost.__file__, self.hostnames[node]),
        )

    def hosts_file(self) -> str:
        """The ``/etc/hosts`` every node sees."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{self.address(n)}\t{h}" for n, h in enumerate(self.hostnames)]
        return "\n".join(lines) + "\n"


def unavailable() -> str | None:
    """Why isolated nodes cannot run here (with the fix), or None when they can."""
    if os.geteuid() != 0:
        return (
            "--network isolated needs root (network namespaces need CAP_NET_ADMIN and "
            "CAP_SYS_ADMIN), and this process runs as user id "
            f"{os.geteuid()}: run Jupyter (or disttrain) as root, or leave out --network "
            "isolated to run the nodes on loopback"
        )
    if shutil.which("ip") is None:
        return (
            "--network isolated needs the `ip` command (iproute2), which is not on PATH: "
            "install iproute2, or leave out --network isolated"
        )
    return None


def _ip(*args: str) -> None:
    try:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)
    except subprocess.CalledProcessError as exc:
        said = exc.stderr.decode(errors="replace").strip()
        raise IsolationError(f"`ip {' '.join(args)}` failed: {said}") from None


def _lease_owner(path: str) -> tuple[str, int]:
    """The run id and owner pid of a lease file (empty and 0 when unreadable)."""
    try:
        with open(path) as fh:
            data = json.load(fh)
        return str(data["run_id"]), int(data["owner"])
    except (OSError, ValueError, KeyError, TypeError):
        return "", 0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Locked:
    """The lease lock (an exclusive ``flock`` on ``LEASES/lock``)."""

    def __enter__(self) -> None:
        os.makedirs(LEASES, mode=0o700, exist_ok=True)
        self._fd = os.open(os.path.join(LEASES, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)  # closing releases the lock


def _stale(path: str, now: float) -> bool:
    """A lease nobody will use: its owner is gone, or it was planned and never claimed in
    :data:`RESERVE_SECONDS` (a ``--dry-run``)."""
    net = _leased(path)
    if net is None or not _alive(_lease_owner(path)[1]):
        return True
    if os.path.exists(os.path.join(NETNS_DIR, net.bridge_namespace)):
        return False
    try:
        return now - os.stat(path).st_mtime > RESERVE_SECONDS
    except FileNotFoundError:
        return True


def _made(path: str) -> bool:
    """Whether the bridge's namespace of the lease at ``path`` exists."""
    net = _leased(path)
    return net is not None and os.path.exists(os.path.join(NETNS_DIR, net.bridge_namespace))


def reserve(run_id: str, hostnames: tuple[str, ...], owner: int) -> NodeNetwork:
    """Lease a free /24 for run ``run_id`` of process ``owner`` (a plan's network: nothing is
    made until :func:`claim`); :class:`IsolationError` when none is free."""
    subnets = list(SUBNETS.subnets(new_prefix=24))
    if len(hostnames) + 2 > subnets[0].num_addresses:
        raise IsolationError(f"{len(hostnames)} nodes do not fit in a /24; use at most 253")
    with _Locked():
        now = time.time()
        for k, subnet in enumerate(subnets):
            path = os.path.join(LEASES, str(k))
            if os.path.exists(path) and (not _stale(path, now) or _made(path)):
                continue  # in use, or gone stale with namespaces that :func:`sweep` removes
            net = NodeNetwork(run_id, str(subnet), hostnames)
            with open(path, "w") as fh:
                json.dump({"owner": owner, **asdict(net)}, fh)
            return net
    raise IsolationError(
        f"every /24 of {SUBNETS} is leased to a running isolated job; stop one, or leave out "
        "--network isolated"
    )


def claim(net: NodeNetwork) -> None:
    """Make the bridge's namespace of a reserved network (the lease is then in use)."""
    with _Locked():
        leased = [e for e in os.listdir(LEASES) if _lease_owner(f"{LEASES}/{e}")[0] == net.run_id]
        if not leased:
            raise IsolationError(
                f"the addresses {net.subnet} planned for this job went to another job since "
                f"(a plan is kept for {RESERVE_SECONDS:g} s): plan the job again"
            )
        _ip("netns", "add", net.bridge_namespace)


def setup(net: NodeNetwork) -> None:
    """Make the bridge and each node's namespace, address and hosts file (after
    :func:`claim`); on an error what was made stays for :func:`teardown`."""
    bridge = ("-n", net.bridge_namespace)
    _ip(*bridge, "link", "set", "lo", "up")
    _ip(*bridge, "link", "add", net.bridge, "type", "bridge")
    _ip(*bridge, "link", "set", net.bridge, "up")
    prefixlen = ipaddress.ip_network(net.subnet).prefixlen
    for node in range(len(net.hostnames)):
        name, veth = net.namespace(node), net.veth(node)
        _ip("netns", "add", name)
        peer = ("peer", "name", NODE_INTERFACE, "netns", name)
        _ip(*bridge, "link", "add", veth, "type", "veth", *peer)
        _ip(*bridge, "link", "set", veth, "master", net.bridge, "up")
        _ip("-n", name, "addr", "add", f"{net.address(node)}/{prefixlen}", "dev", NODE_INTERFACE)
        _ip("-n", name, "link", "set", NODE_INTERFACE, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        os.makedirs(os.path.join(ETC_NETNS, name), exist_ok=True)
        with open(os.path.join(ETC_NETNS, name, "hosts"), "w") as fh:
            fh.write(net.hosts_file())


def _delete(name: str) -> None:
    """Kill what runs in namespace ``name``, delete it and its hosts folder."""
    for pid in _pids(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    shutil.rmtree(os.path.join(ETC_NETNS, name), ignore_errors=True)


def _pids(namespace: str) -> list[int]:
    """The processes in ``namespace`` (none when it does not exist)."""
    if not os.path.exists(os.path.join(NETNS_DIR, namespace)):
        return []
    done = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30
    )
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def teardown(net: NodeNetwork, grace: float = 0.0) -> None:
    """Remove ``net``: wait up to ``grace`` seconds for its processes to end, kill what is
    left, delete its namespaces (their veth pairs go with them), hosts files and lease."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_pids(ns) for ns in net.namespaces):
        time.sleep(0.1)
    for _ in range(50):  # a dying process may still be listed: ask until none is
        pids = [pid for ns in net.namespaces for pid in _pids(ns)]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for name in net.namespaces:
        _delete(name)
    with _Locked():
        for entry in os.listdir(LEASES):
            path = os.path.join(LEASES, entry)
            if entry != "lock" and _lease_owner(path)[0] == net.run_id:
                os.unlink(path)


def _leased(path: str) -> NodeNetwork | None:
    try:
        with open(path) as fh:
            data = json.load(fh)
        return NodeNetwork(str(data["run_id"]), str(data["subnet"]), tuple(data["hostnames"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def sweep() -> list[str]:
    """Tear down the networks whose owner is gone (a reaper that could not run), forget
    plans never started, and delete namespaces of this kind that no lease names; their run
    ids and names. A lease is judged and removed under the lock (a job claiming it then is told to
    plan again), its namespaces deleted after. A namespace is made only while its lease
    exists, so one without a lease is left over."""
    stale, leased = [], set()
    try:
        with _Locked():
            now = time.time()
            for entry in os.listdir(LEASES):
                path = os.path.join(LEASES, entry)
                if entry == "lock":
                    continue
                if not _stale(path, now):
                    leased.add(_lease_owner(path)[0])
                    continue
                net = _leased(path)
                os.unlink(path)
                if net is not None:
                    stale.append(net)
            orphans = _orphans(leased | {net.run_id for net in stale})
    except FileNotFoundError:
        return []
    for net in stale:
        teardown(net)
    for name in orphans:
        _delete(name)
    return [net.run_id for net in stale] + sorted(orphans)


def _orphans(leased: set[str]) -> list[str]:
    """The namespaces named ``distrain-RUNID-...`` whose run id is not in ``leased``."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    mine = [n for n in names if n.startswith(PREFIX)]
    return [n for n in mine if n[len(PREFIX) :].split("-")[0] not in leased]


def leftovers(run_id: str) -> list[str]:
    """Namespaces, hosts folders and leases of run ``run_id`` that exist (for checks)."""
    found = []
    for folder in (NETNS_DIR, ETC_NETNS):
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        found += [f"{folder}/{n}" for n in names if n.startswith(f"{PREFIX}{run_id}-")]
    try:
        leases = [e for e in os.listdir(LEASES) if e != "lock"]
    except FileNotFoundError:
        leases = []
    found += [f"{LEASES}/{e}" for e in leases if _lease_owner(f"{LEASES}/{e}")[0] == run_id]
    return sorted(found)


def start_reaper(net: NodeNetwork, log: str) -> subprocess.Popen[bytes]:
    """A process that tears ``net`` down once its stdin closes (the owner's end, however it
    ends: close it to end the job's network, then wait for the process)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-I", __file__, json.dumps(asdict(net))],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a stop of the job's process group does not end it
        )


def in_namespace(namespace: str, action: Callable[[], T]) -> T:
    """``action()`` on a thread that entered ``namespace``; a socket it makes stays there."""
    result: list[T] = []
    error: list[BaseException] = []

    def enter() -> None:
        try:
            fd = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"cannot enter namespace {namespace}: {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append(action())
        except BaseException as exc:  # handed to the caller
            error.append(exc)

    thread = threading.Thread(target=enter, name="distrain-netns", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def connect(namespace: str, port: int, timeout: float) -> socket.socket:
    """A connection to ``127.0.0.1:port`` inside ``namespace`` (a rank's own loopback)."""
    return in_namespace(namespace, lambda: socket.create_connection(("127.0.0.1", port), timeout))


def _reap(spec: str) -> None:
    data = json.loads(spec)
    net = NodeNetwork(str(data["run_id"]), str(data["subnet"]), tuple(data["hostnames"]))
    sys.stdin.buffer.read()  # until the owner closes the pipe or dies
    teardown(net, grace=REAP_GRACE_SECONDS)


if __name__ == "__main__":
    _reap(sys.argv[1])
