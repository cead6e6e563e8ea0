"""The plan of a local job: ports on loopback, the agents' commands and environment."""

from __future__ import annotations

import dataclasses
import os
import random
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...frameworks import LaunchContext, Process, framework
from ...payload import Payload
from ...runtime import forkclient, jobkey, warm
from ...runtime.agent import ENV_BIND
from ...runtime.env import ENV_JOB_ID
from ...spec import JobSpec
from ..base import (
    BackendError,
    Plan,
)
from ..environment import PG_TIMEOUT, spec_env
from . import jobdir
from .netns import NodeNetwork

POLL_SECONDS = 0.05
KILL_GRACE_SECONDS = 3.0
#: After a rank's error with no restarts left, give the others this long to report.
FAILURE_GRACE_SECONDS = 2.0
LOOPBACK = "127.0.0.1"
LOCAL_WORKER_MODULE = "jupyter_disttrain.runtime.localworker"  # the worker, stores on loopback


#: The lowest port a job is given (see :func:`free_ports`).
PORT_FLOOR = 10_000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The ports local jobs listen on, ``LOW-HIGH`` (both included) when set: a range a firewall
#: leaves open, or one no other service of the machine uses.
ENV_PORTS = "DISTRAIN_PORTS"
PORTS_EXAMPLE = "20000-20999"


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (Linux's default when unreadable)."""
    try:
        low, high = (int(part) for part in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def chosen_ports(environ: Mapping[str, str] = os.environ) -> range | None:
    """The ports :data:`ENV_PORTS` gives local jobs; None when it is unset or empty.

    :class:`BackendError` names the variable and the fix for a value that is not a range
    of ports ``LOW-HIGH`` from 1024 to 65535.
    """
    value = environ.get(ENV_PORTS, "").strip()
    if not value:
        return None
    low, dash, high = value.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first, last = 0, -1
    if not dash or not 1024 <= first <= last <= 65535:
        raise BackendError(
            f"{ENV_PORTS}={value!r} is not a range of ports: give the lowest and the highest "
            f"port local jobs may listen on, from 1024 to 65535, e.g. "
            f"{ENV_PORTS}={PORTS_EXAMPLE}, or unset it"
        )
    return range(first, last + 1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (see :func:`free_ports`)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that are free right now.

    From :data:`ENV_PORTS` when it is set (:class:`BackendError` when fewer than
    ``count`` of them are free). Otherwise below the kernel's ephemeral range when it
    leaves room: a port from that range (what binding port 0 gives) can be taken by any
    outgoing connection of the host before the job's process listens on it, and a
    TensorFlow worker binds its gRPC port only after its imports (~10 s; "Could not
    start gRPC server" on a busy host). Below the range, only another process's explicit
    bind can take it.
    """
    chosen = chosen_ports()
    low, _ = ephemeral_range()
    socks: list[socket.socket] = []
    try:
        if chosen is not None:
            _bind_some(random.sample(chosen, len(chosen)), count, socks)
            if len(socks) < count:
                free = (
                    f"{len(socks)} of its {len(chosen)} ports {'is' if len(socks) == 1 else 'are'}"
                )
                raise BackendError(
                    f"{ENV_PORTS}={chosen.start}-{chosen.stop - 1}: {free} free, and the job "
                    f"needs {count}: widen the range, or end what listens there"
                )
        elif low - PORT_FLOOR > 64 * count:
            _bind_some(random.sample(range(PORT_FLOOR, low), 64 * count), count, socks)
        while len(socks) < count:  # no room below the range: the kernel's choice
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _bind_some(ports: Sequence[int], count: int, socks: list[socket.socket]) -> None:
    """Bind sockets on ``ports`` in turn (skipping taken ones) into ``socks`` until it holds
    ``count``; each stays bound, so the kernel gives none of them out twice meanwhile."""
    for port in ports:
        if len(socks) == count:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            sock.close()
            continue
        socks.append(sock)


#: How one node's process is started (the framework's launcher plans it).
NodeLaunch = Process


@dataclass(frozen=True)
class LocalPlan(Plan):
    """Everything ``submit`` will do for a job; ``str()`` prints it for ``--dry-run``."""

    spec: JobSpec
    payload: Payload
    job_dir: str
    rdzv_endpoint: str
    mode: str  # "fork" (warm launcher) or "exec" (fresh interpreters)
    nodes: tuple[NodeLaunch, ...]
    payload_bytes: int
    captures: str = ""
    notes: tuple[str, ...] = field(default=())
    #: The nodes' own network namespaces (``--network isolated``); None: all on loopback.
    network: NodeNetwork | None = None

    def prefix(self, node: int) -> tuple[str, ...]:
        """What node ``node``'s command starts under: its namespace and host name, if any."""
        return self.network.prefix(node) if self.network else ()

    def __str__(self) -> str:
        spec = self.spec
        fw = framework(spec.framework)
        lines = [
            f"job {spec.name}: {spec.nodes} node(s) x {spec.nproc} process(es) = "
            f"{spec.world_size} rank(s), local backend",
            fw.describe_cluster(self.rdzv_endpoint),
            f"launch: {self.mode} "
            + (
                "(agents and workers forked from a warm launcher)"
                if self.mode == "fork"
                else f"(a fresh interpreter per worker: {fw.title} is not fork-safe)"
                if not fw.fork_safe
                else "(fresh interpreters, each node's in its own network namespace)"
                if self.network
                else "(fresh interpreters)"
            ),
            f"job directory: {self.job_dir}",
            f"payload: {self.payload_bytes} bytes; {self.captures}",
            f"timeout: {spec.timeout or 'none'}; max restarts: {spec.max_restarts}",
        ]
        if self.network is not None:
            net = self.network
            lines.append(
                f"network: isolated, {net.subnet} on bridge {net.bridge} in namespace "
                f"{net.bridge_namespace}; node N in namespace {net.namespace(0)[:-1]}N"
            )
        for node in self.nodes:
            prefix = shlex.join(self.prefix(node.node))
            lines.append(f"node {node.node}: {prefix + ' ' if prefix else ''}{node.command()}")
        lines.extend(self.notes)
        return "\n".join(lines)


def build_plan(
    spec: JobSpec,
    payload: Payload,
    directory: Path,
    *,
    mode: str,
    port: int,
    base_env: dict[str, str] | None = None,
    ports: Sequence[int] = (),
    network: NodeNetwork | None = None,
) -> LocalPlan:
    """The launch plan for ``spec`` (pure apart from the arguments given).

    With ``network`` each node runs in its namespace (see :mod:`.netns`): the
    launcher gives it its address and its stores listen there. Otherwise the
    nodes share loopback, and gloo and NCCL are told ``lo`` unless the spec's
    environment names another interface (a user's ``--env`` always wins).

    ``port`` is the rendezvous port; ``ports`` the free ports the framework's
    launcher asks for (TensorFlow, JAX: one per process; picked when not given).
    The launcher plans the processes; a launcher that does not fork makes the
    plan ``exec``.
    """
    payload_path = str(directory / "payload.pkl")
    logs = jobdir.logs_dir(directory)
    # fork: the worker command is the fork client, run as a script (it imports no package)
    worker = ("-m", LOCAL_WORKER_MODULE) if mode != "fork" else forkclient.torchrun_command()
    interfaces = {} if network else {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
    shared = spec_env(spec)
    timeout = {PG_TIMEOUT: shared.pop(PG_TIMEOUT)} if PG_TIMEOUT in shared else {}
    env = {
        **(base_env or {}),
        **interfaces,
        **timeout,  # a user's --env of it wins
        **spec.env_dict(),
        ENV_JOB_ID: spec.name,
        "DISTRAIN_JOB_DIR": str(directory),
        "DISTRAIN_LOG_DIR": str(logs),
        jobkey.ENV_KEY_FILE: str(directory / jobkey.KEY_FILE),
        "DISTRAIN_CHECKPOINT_DIR": spec.checkpoint_dir or str(directory / "checkpoints"),
        "PYTHONUNBUFFERED": "1",
        **shared,
    }
    ahead = warm.chosen(payload.packages)
    if ahead:  # the launcher imports them once for all the job's processes (--env wins)
        env.setdefault(warm.ENV_WARM, ",".join(ahead))
    if spec.nproc > 1:  # torchrun's own default, without its warning in every agent log
        env.setdefault("OMP_NUM_THREADS", "1")
    if spec.max_restarts:  # restarted workers must not meet the last round's store keys
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    fw = framework(spec.framework)
    launcher = fw.launch
    needed = launcher.ports(spec)
    context = LaunchContext(
        spec=spec,
        payload_path=payload_path,
        logs=str(logs),
        host=LOOPBACK,
        port=port,
        ports=tuple(ports) if ports or not needed else tuple(free_ports(needed)),
        worker=worker,
        env=env,
        hosts=tuple(network.address(n) for n in range(spec.nodes)) if network else (),
    )
    nodes = launcher.processes(fw, context)
    if network is not None:
        nodes = tuple(
            dataclasses.replace(n, env={**n.env, ENV_BIND: network.address(n.node)}) for n in nodes
        )
    return LocalPlan(
        spec=spec,
        payload=payload,
        job_dir=str(directory),
        rdzv_endpoint=launcher.endpoint(context),
        mode=mode if launcher.forks else "exec",
        nodes=nodes,
        payload_bytes=len(payload.data),
        captures=payload.describe(),
        notes=launcher.notes(spec),
        network=network,
    )
