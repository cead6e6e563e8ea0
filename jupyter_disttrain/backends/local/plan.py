"""The plan of a local job: ports on loopback, the agents' commands and environment."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...frameworks import WORKERS, Framework, framework
from ...payload import Payload
from ...runtime import forkclient, jobkey
from ...spec import JobSpec
from ..base import (
    Plan,
)
from . import jobdir

POLL_SECONDS = 0.05
KILL_GRACE_SECONDS = 3.0
#: After a rank's error with no restarts left, give the others this long to report.
FAILURE_GRACE_SECONDS = 2.0
LOOPBACK = "127.0.0.1"
TORCHRUN = "jupyter_disttrain.runtime.agent"  # torchrun, with loopback-only stores
WORKER_MODULE = "jupyter_disttrain.runtime.worker"
LOCAL_WORKER_MODULE = "jupyter_disttrain.runtime.localworker"  # the worker, stores on loopback


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that are free right now."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass(frozen=True)
class NodeLaunch:
    """How one node is started: ``python -m MODULE ARGV`` (torchrun, or one worker process)."""

    node: int
    argv: tuple[str, ...]  # arguments of ``module``
    env: dict[str, str]  # set on top of the owner's environment
    log: str  # the process's own output, before the worker redirects to its rank log
    module: str = TORCHRUN

    def command(self) -> str:
        """The equivalent shell command line."""
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        program = "torchrun" if self.module == TORCHRUN else f"python -m {self.module}"
        return f"{envs} {program} {shlex.join(self.argv)}"


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
                else "(fresh interpreters)"
            ),
            f"job directory: {self.job_dir}",
            f"payload: {self.payload_bytes} bytes; {self.captures}",
            f"timeout: {spec.timeout or 'none'}; max restarts: {spec.max_restarts}",
        ]
        for node in self.nodes:
            lines.append(f"node {node.node}: {node.command()}")
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
) -> LocalPlan:
    """The launch plan for ``spec`` (pure apart from the arguments given).

    ``port`` is the c10d rendezvous port; the workers of a framework launched
    as ``workers`` (TensorFlow, JAX) listen on ``ports`` (one per process, ``--nodes``
    times ``--nproc``; free ones are picked when not given).
    """
    payload_path = str(directory / "payload.pkl")
    logs = jobdir.logs_dir(directory)
    endpoint = f"{LOOPBACK}:{port}"
    # fork: the worker command is the fork client, run as a script (it imports no package)
    worker = ("-m", LOCAL_WORKER_MODULE) if mode != "fork" else (forkclient.__file__,)
    env = {
        **(base_env or {}),
        **spec.env_dict(),
        "DISTRAIN_JOB_ID": spec.name,
        "DISTRAIN_JOB_DIR": str(directory),
        "DISTRAIN_LOG_DIR": str(logs),
        jobkey.ENV_KEY_FILE: str(directory / jobkey.KEY_FILE),
        "DISTRAIN_CHECKPOINT_DIR": spec.checkpoint_dir or str(directory / "checkpoints"),
        "PYTHONUNBUFFERED": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
    }
    if spec.timeout:
        env.setdefault("DISTRAIN_PG_TIMEOUT", str(max(30, int(spec.timeout))))
    if spec.nproc > 1:  # torchrun's own default, without its warning in every agent log
        env.setdefault("OMP_NUM_THREADS", "1")
    if spec.resume:
        env["DISTRAIN_RESUME"] = spec.resume
    if spec.grace_period:
        env["DISTRAIN_GRACE_PERIOD"] = f"{spec.grace_period:g}"
    if spec.hang_after is not None:
        env["DISTRAIN_HANG_AFTER"] = f"{spec.hang_after:g}"
    if spec.autolog != "all":
        env["DISTRAIN_AUTOLOG"] = spec.autolog
    if spec.post_mortem:
        env["DISTRAIN_POST_MORTEM"] = "1"
    if spec.where_locals:
        env["DISTRAIN_WHERE_LOCALS"] = "1"
    if spec.max_restarts:  # restarted workers must not meet the last round's store keys
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    fw = framework(spec.framework)
    if fw.launch == WORKERS:
        ports = list(ports) or free_ports(spec.world_size)
        return _workers_plan(fw, spec, payload, directory, env, ports)
    nodes = []
    for node in range(spec.nodes):
        argv = (
            "--nnodes", str(spec.nodes),
            "--nproc-per-node", str(spec.nproc),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint,
            "--rdzv-id", spec.name,
            "--rdzv-conf", f"is_host={1 if node == 0 else 0}",
            "--local-addr", LOOPBACK,
            "--max-restarts", str(spec.max_restarts),
            "--monitor-interval", "0.1",
            *worker, payload_path,
        )  # fmt: skip
        nodes.append(NodeLaunch(node, argv, env, str(logs / f"agent-{node}.log")))
    notes: tuple[str, ...] = ()
    if spec.dist_backend == "nccl":
        notes = ("note: nccl needs CUDA; without it the workers fall back to gloo",)
    return LocalPlan(
        spec, payload, str(directory), endpoint, mode, tuple(nodes), len(payload.data),
        payload.describe(), notes,
    )  # fmt: skip


def _workers_plan(
    fw: Framework,
    spec: JobSpec,
    payload: Payload,
    directory: Path,
    env: dict[str, str],
    ports: list[int],
) -> LocalPlan:
    """One fresh worker process per rank, each told its cluster by ``fw`` (``TF_CONFIG``,
    ``JAX_*``); rank ``node * nproc + local`` is process ``local`` of node ``node``."""
    if len(set(ports)) != spec.world_size:
        raise ValueError(
            f"a {fw.title} job of {spec.world_size} processes needs as many distinct ports"
        )
    logs = jobdir.logs_dir(directory)
    addresses = [f"{LOOPBACK}:{p}" for p in ports]
    nodes = []
    for rank in range(spec.world_size):
        node, local = divmod(rank, spec.nproc)
        node_env = {
            **env, **fw.cluster_env(addresses, rank),
            "RANK": str(rank), "WORLD_SIZE": str(spec.world_size), "GROUP_RANK": str(node),
            "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(spec.nproc),
        }  # fmt: skip
        argv = (str(directory / "payload.pkl"),)
        log = str(logs / f"agent-{rank}.log")
        nodes.append(NodeLaunch(rank, argv, node_env, log, module=WORKER_MODULE))
    return LocalPlan(
        spec, payload, str(directory), ",".join(addresses), "exec", tuple(nodes),
        len(payload.data), payload.describe(),
    )  # fmt: skip
