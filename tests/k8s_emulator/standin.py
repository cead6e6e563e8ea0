"""Hosted pods: a job's pods whose ranks run in one stand-in process (the scale harness).

A container whose environment has ``DISTRAIN_STANDIN_JOB`` is hosted: node 0's
container runs its command (``python -m jupyter_disttrain.runtime.standin ...``,
which plays every node's ranks) as an ordinary process, and its framed output
(``@NODE line`` / ``!NODE code``, see that module) is split into each node's
container log and exit; the other nodes' containers start no process, show
Running, hold the lines their node said and end with the code it ended with.
Everything the API serves (pods, statuses, logs, Events) is as for other pods,
so a job of 1,024 pods costs one process. The node is ``PET_NODE_RANK``
(Trainer v2, PyTorchJob), else ``JOB_COMPLETION_INDEX``, else ``RANK``.

No rank steps before every node's pod has started, as in a real job, whose
rendezvous waits for all ``PET_NNODES`` nodes: the stand-in process is started
with ``ENV_RENDEZVOUS`` (see :mod:`jupyter_disttrain.runtime.standin`) and waits
for a line on its stdin, which it gets once every node's container has started
(:meth:`HostedJob.attach`). Without it a rank of a pod the emulator had not
created yet could fail, and no pod showed it.
"""

from __future__ import annotations

import io
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final

from .logs import ContainerLog
from .meta import Obj, now

if TYPE_CHECKING:
    from .container import ContainerRunner

ENV_JOB: Final = "DISTRAIN_STANDIN_JOB"
#: The exit code of hosted nodes still up when the stand-in process ends (killed with it).
GONE: Final = 137


def nodes_of(env: dict[str, str]) -> int | None:
    """The job's node count (``PET_NNODES``), or None (elastic, or not given)."""
    value = env.get("PET_NNODES", "")
    return int(value) if value.isdigit() else None


def runs_elsewhere(env: dict[str, str]) -> bool:
    """Whether a container with ``env`` is a hosted node other than 0: it runs no process
    of its own, so its pod needs no sandbox network (an emulator's /24 holds 252 pods)."""
    return bool(env.get(ENV_JOB)) and node_of(env) != 0


def node_of(env: dict[str, str]) -> int:
    for name in ("PET_NODE_RANK", "JOB_COMPLETION_INDEX", "RANK"):
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


@dataclass
class HostedJob:
    """One job's nodes: their logs as they come, and their exit codes."""

    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    logs: dict[int, ContainerLog] = field(default_factory=dict)
    early: dict[int, list[bytes]] = field(default_factory=dict)
    exits: dict[int, int] = field(default_factory=dict)
    #: Set when a node ended, or its pod is stopping. A node's container blocks on its own,
    #: without a timeout: a thousand threads waking to poll (one condition, or each its
    #: own) kept hundreds waiting for the interpreter lock and starved the output pump.
    ended: dict[int, threading.Event] = field(default_factory=dict)
    #: The containers waiting for their node's end: node -> its pod's ``stopping``.
    waiting: dict[int, threading.Event] = field(default_factory=dict)
    watcher: threading.Thread | None = None
    #: The stand-in's stdin and the node count it waits for, until the rendezvous line went.
    gate: tuple[IO[bytes], int] | None = None

    def attach(self, node: int, log: ContainerLog) -> None:
        """``log`` is node ``node``'s (lines said before it started go in first)."""
        with self.lock:
            self.logs[node] = log
            early = self.early.pop(node, [])
        if early:
            log.extend(early, time.time())
        self.open_gate()

    def hold(self, stdin: IO[bytes], nodes: int) -> None:
        """The stand-in reading ``stdin`` starts once ``nodes`` nodes' containers started."""
        with self.lock:
            self.gate = (stdin, nodes)
        self.open_gate()

    def open_gate(self) -> None:
        with self.lock:
            if self.gate is None or len(self.logs) < self.gate[1]:
                return
            stdin, self.gate = self.gate[0], None
        try:
            with stdin:
                stdin.write(b"rendezvous\n")
        except OSError:
            pass  # the stand-in already ended

    def lines(self, node: int, texts: list[bytes]) -> None:
        with self.lock:
            log = self.logs.get(node)
            if log is None:
                self.early.setdefault(node, []).extend(texts)
                return
        log.extend(texts, time.time())

    def end(self, node: int, code: int) -> None:
        with self.lock:
            self.exits.setdefault(node, code)
            self._ended(node).set()

    def end_all(self, code: int) -> None:
        with self.lock:
            for node in self.logs:
                self.exits.setdefault(node, code)
                self._ended(node).set()

    def wait_exit(self, node: int, stopping: threading.Event) -> int:
        """Node ``node``'s exit code once it ended (or :data:`GONE` once the pod is stopped)."""
        with self.lock:
            ended = self._ended(node)
            self.waiting[node] = stopping
            if self.watcher is None:
                self.watcher = threading.Thread(target=self._watch, name="hosted-stops")
                self.watcher.daemon = True
                self.watcher.start()
        ended.wait()
        with self.lock:
            self.waiting.pop(node, None)
            return self.exits.get(node, GONE)

    def _watch(self) -> None:
        """One thread for every waiting container: wake those whose pod is stopping."""
        while True:
            time.sleep(0.5)
            with self.lock:
                if not self.waiting:
                    self.watcher = None  # the next waiter starts another
                    return
                for node, stopping in self.waiting.items():
                    if stopping.is_set():
                        self._ended(node).set()

    def _ended(self, node: int) -> threading.Event:
        """Node ``node``'s end (hold :attr:`lock`)."""
        return self.ended.setdefault(node, threading.Event())

    def pump(self, proc: subprocess.Popen[bytes]) -> None:
        """Split the stand-in process's output into its nodes' logs and exits.

        Read in blocks and handed to each log in batches: at 8,192 ranks the process
        writes 16,000 lines a second, more than a line-by-line reader sharing this
        process's interpreter lock with the API server kept up with (the stand-in then
        waited on a full pipe, and rank 0's relay with it)."""
        out = proc.stdout
        assert isinstance(out, io.BufferedReader)
        pending = b""
        with out:
            while block := out.read1(1 << 20):
                *whole, pending = (pending + block).split(b"\n")
                self.split(whole)
        if pending:
            self.split([pending])
        self.end_all(GONE)

    def split(self, raw_lines: list[bytes]) -> None:
        """Hand framed lines (without their newline) to their nodes, in order per node."""
        by_node: dict[int, list[bytes]] = {}
        for raw in raw_lines:
            head, _, rest = raw.partition(b" ")
            if head[:1] == b"@" and head[1:].isdigit():
                by_node.setdefault(int(head[1:]), []).append(rest + b"\n")
            elif head[:1] == b"!" and head[1:].isdigit():
                self.flush(by_node)
                by_node = {}
                self.end(int(head[1:]), int(rest.strip() or GONE))
            else:  # the process's own words (a traceback, a warning): node 0's log
                by_node.setdefault(0, []).append(raw + b"\n")
        self.flush(by_node)

    def flush(self, by_node: dict[int, list[bytes]]) -> None:
        for node, texts in by_node.items():
            self.lines(node, texts)


class StandinPods:
    """The kubelet's hosted jobs, by the job name the containers' environment gives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, HostedJob] = {}

    def job(self, env: dict[str, str]) -> HostedJob | None:
        name = env.get(ENV_JOB)
        if not name:
            return None
        with self._lock:
            return self._jobs.setdefault(name, HostedJob(name))


def run_hosted(
    runner: ContainerRunner, job: HostedJob, node: int, log: ContainerLog
) -> tuple[int, Obj]:
    """Run a hosted container of a node other than 0: Running until its node ends."""
    worker = runner.worker
    runner.container_id = f"emulator://{uuid.uuid4().hex}"
    started = now()
    job.attach(node, log)
    with worker.lock:
        runner.logs.append(log)
        runner.ever_started = True
        runner.state = {"running": {"startedAt": started}}
    worker.event("Normal", "Created", f"Created container {runner.name}", runner.name)
    worker.event("Normal", "Started", f"Started container {runner.name}", runner.name)
    worker.publish()
    code = job.wait_exit(node, worker.stopping)
    log.close()
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started,
        "finishedAt": now(),
        "containerID": runner.container_id,
    }
    if code > 128:
        terminated["signal"] = code - 128
    return code, terminated
