"""How a framework's processes start on one machine: a :class:`Launcher` each framework declares.

The local backend gives a launcher a :class:`LaunchContext` (the job's spec,
payload, environment, loopback address and free ports) and starts the
:class:`Process` list it returns, each as ``python -m MODULE ARGV`` in the
job's process group. The two built-in shapes are :class:`TorchrunAgents`
(one torchrun agent per node, which starts and restarts ``--nproc`` workers
after a c10d rendezvous) and :class:`ProcessPerWorker` (one fresh worker per
rank, told its cluster by :meth:`~.base.Framework.cluster_env`). A launcher
of another shape (one process per node that starts its own ranks, as MPI or
DeepSpeed do) is a subclass of :class:`Launcher` in its framework's module.
Pure: nothing here starts a process.
"""

from __future__ import annotations

import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..spec import JobSpec

#: torchrun, with loopback-only stores and an end with its owner (``runtime/agent.py``).
TORCHRUN_MODULE = "jupyter_disttrain.runtime.agent"
#: torchrun's ``--log-dir`` (its per-attempt folders), in the job's folder beside ``logs``.
TORCHRUN_LOGS = "torchelastic"
#: The worker that runs a payload on one rank (``runtime/worker.py``).
WORKER_MODULE = "jupyter_disttrain.runtime.worker"


class Framework(Protocol):
    """What a launcher asks of the framework it starts (see :class:`~.base.Framework`)."""

    @property
    def title(self) -> str:
        """The framework's name in messages."""
        ...

    def cluster_env(self, addresses: Sequence[str], index: int) -> dict[str, str]:
        """The environment telling worker ``index`` its cluster."""
        ...


@dataclass(frozen=True)
class Process:
    """One process the backend starts: ``python -m MODULE ARGV`` with ``env`` on top of the
    owner's, its own output appended to ``log``; ``program`` names it in the plan."""

    node: int
    argv: tuple[str, ...]
    env: dict[str, str]
    log: str
    module: str
    program: str = ""

    def command(self) -> str:
        """The equivalent shell command line."""
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        program = self.program or f"python -m {self.module}"
        return f"{envs} {program} {shlex.join(self.argv)}"


@dataclass(frozen=True)
class LaunchContext:
    """What a launcher plans with: ``host`` is the loopback address every process binds,
    ``port`` a free port for a rendezvous, ``ports`` as many free ports as
    :meth:`Launcher.ports` asked for; ``worker`` is the worker command an agent
    starts per rank (``-m MODULE`` or a script); ``env`` goes to every process."""

    spec: JobSpec
    payload_path: str
    logs: str
    host: str
    port: int
    ports: tuple[int, ...]
    worker: tuple[str, ...]
    env: Mapping[str, str]
    #: Each node's own address when the nodes have one (``--network isolated``), else empty.
    hosts: tuple[str, ...] = ()

    def node_host(self, node: int) -> str:
        """The address node ``node`` binds and is reached at (``host`` unless ``hosts``)."""
        return self.hosts[node] if self.hosts else self.host

    def log(self, index: int) -> str:
        """The own-output log of process ``index`` (``agent-N.log`` in the logs folder)."""
        return f"{self.logs}/agent-{index}.log"

    def rank_env(self, rank: int) -> dict[str, str]:
        """The torchrun-style variables of ``rank``: rank ``node * nproc + local``."""
        spec = self.spec
        node, local = divmod(rank, spec.nproc)
        return {
            "RANK": str(rank),
            "WORLD_SIZE": str(spec.world_size),
            "GROUP_RANK": str(node),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(spec.nproc),
        }


class Launcher(ABC):
    """How a framework's processes start; ``forks``: they are torchrun agents the local
    backend's warm launcher can fork (otherwise each is a fresh interpreter)."""

    forks: bool = False
    #: Its processes are one per node and use :meth:`LaunchContext.node_host`: each node may
    #: run in a network namespace of its own.
    isolates: bool = False
    #: Its processes meet in torchrun's c10d rendezvous (a cluster's manifests scale its
    #: timeouts to the world size).
    c10d_rendezvous: bool = False

    def ports(self, spec: JobSpec) -> int:
        """How many free loopback ports the processes need besides the rendezvous port."""
        return 0

    def endpoint(self, ctx: LaunchContext) -> str:
        """Where the workers find each other (given to the framework's ``describe_cluster``)."""
        return f"{ctx.node_host(0)}:{ctx.port}"

    def notes(self, spec: JobSpec) -> tuple[str, ...]:
        """Lines the plan adds about this launch."""
        return ()

    @abstractmethod
    def processes(self, fw: Framework, ctx: LaunchContext) -> tuple[Process, ...]:
        """The processes to start for a job of ``fw``; ``ValueError`` for an unusable context."""


class TorchrunAgents(Launcher):
    """One torchrun agent per node: a c10d rendezvous hosted by node 0, ``--nproc`` workers
    each, restarted in place up to ``--max-restarts`` times."""

    forks = True
    isolates = True
    c10d_rendezvous = True

    def processes(self, fw: Framework, ctx: LaunchContext) -> tuple[Process, ...]:
        """``--nodes`` agents, node ``n``'s output in ``agent-n.log``."""
        spec = ctx.spec
        out = []
        for node in range(spec.nodes):
            argv = (
                *("--nnodes", str(spec.nodes), "--nproc-per-node", str(spec.nproc)),
                *("--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint(ctx)),
                *("--rdzv-id", spec.name, "--rdzv-conf", f"is_host={1 if node == 0 else 0}"),
                *("--local-addr", ctx.node_host(node), "--max-restarts", str(spec.max_restarts)),
                *("--monitor-interval", "0.1"),
                # its per-attempt folders in the job's, not one more torchelastic_* in /tmp
                *("--log-dir", os.path.join(os.path.dirname(ctx.logs), TORCHRUN_LOGS)),
                *ctx.worker,
                ctx.payload_path,
            )
            env = dict(ctx.env)
            out.append(Process(node, argv, env, ctx.log(node), TORCHRUN_MODULE, "torchrun"))
        return tuple(out)

    def notes(self, spec: JobSpec) -> tuple[str, ...]:
        """A note when ``--dist-backend nccl`` may fall back to gloo."""
        if spec.dist_backend == "nccl":
            return ("note: nccl needs CUDA; without it the workers fall back to gloo",)
        return ()


class ProcessPerWorker(Launcher):
    """One fresh worker process per rank, each listening on a port of its own and told its
    cluster by the framework (``TF_CONFIG``, ``JAX_*``); nothing restarts a worker."""

    def ports(self, spec: JobSpec) -> int:
        """One per rank."""
        return spec.world_size

    def endpoint(self, ctx: LaunchContext) -> str:
        """Every worker's address, comma-separated."""
        return ",".join(f"{ctx.host}:{p}" for p in ctx.ports)

    def processes(self, fw: Framework, ctx: LaunchContext) -> tuple[Process, ...]:
        """Rank ``r`` is process ``r``, its output in ``agent-r.log``."""
        spec = ctx.spec
        if len(set(ctx.ports)) != spec.world_size:
            raise ValueError(
                f"a {fw.title} job of {spec.world_size} processes needs as many distinct ports"
            )
        addresses = [f"{ctx.host}:{p}" for p in ctx.ports]
        out = []
        for rank in range(spec.world_size):
            env = {**ctx.env, **fw.cluster_env(addresses, rank), **ctx.rank_env(rank)}
            argv = (ctx.payload_path,)
            out.append(Process(rank, argv, env, ctx.log(rank), WORKER_MODULE))
        return tuple(out)
