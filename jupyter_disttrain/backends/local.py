"""The local backend: N real torchrun node agents on this machine, over loopback.

Each "node" is a torchrun agent doing real c10d rendezvous on 127.0.0.1 and
a free port, with ``--nproc`` workers: the launch path of a cluster, smaller.
Agents and workers are forked from the warm launcher (see
``runtime/zygote.py``) when it is available, otherwise started as fresh
interpreters. Every process of a job is in one process group, or a child of
a member, so stop, timeout, failure and owner exit end all of them.

With ``--framework tensorflow`` each node is one worker process instead of an
agent: a fresh interpreter (TensorFlow starts threads when it is imported, so
forking a warm one is unsafe) running the worker runtime with the
``TF_CONFIG`` a cluster would give it, workers on free ports of 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .. import events as ev
from .. import jobdir
from ..payload import Payload
from ..runtime.protocol import PREFIX
from ..spec import JobSpec
from .base import (
    Backend,
    BackendError,
    Capabilities,
    EventSink,
    JobExists,
    JobNotFound,
    JobRecord,
    Plan,
    Submission,
)
from .launcher import Launcher, LauncherError, ProcessHandle, shared_launcher

POLL_SECONDS = 0.05
KILL_GRACE_SECONDS = 3.0
#: After a rank's error with no restarts left, give the others this long to report.
FAILURE_GRACE_SECONDS = 2.0
LOOPBACK = "127.0.0.1"
TORCHRUN = "torch.distributed.run"
WORKER_MODULE = "jupyter_disttrain.runtime.worker"


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
    """How one node is started: ``python -m MODULE ARGV`` (torchrun, or a TensorFlow worker)."""

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
        tf = spec.framework == "tensorflow"
        lines = [
            f"job {spec.name}: {spec.nodes} node(s) x {spec.nproc} process(es) = "
            f"{spec.world_size} rank(s), local backend",
            f"cluster: TF_CONFIG workers {self.rdzv_endpoint} (worker 0 is the chief)"
            if tf
            else f"rendezvous: c10d at {self.rdzv_endpoint} (node 0 hosts the store)",
            f"launch: {self.mode} "
            + (
                "(agents and workers forked from a warm launcher)"
                if self.mode == "fork"
                else "(a fresh interpreter per worker: TensorFlow is not fork-safe)"
                if tf
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

    ``port`` is the c10d rendezvous port; a TensorFlow job's workers listen on
    ``ports`` (one per node; free ones are picked when not given).
    """
    payload_path = str(directory / "payload.pkl")
    logs = jobdir.logs_dir(directory)
    endpoint = f"{LOOPBACK}:{port}"
    entry = (
        "jupyter_disttrain.runtime.forkclient"
        if mode == "fork"
        else ("jupyter_disttrain.runtime.worker")
    )
    env = {
        **(base_env or {}),
        **spec.env_dict(),
        "DISTRAIN_JOB_ID": spec.name,
        "DISTRAIN_JOB_DIR": str(directory),
        "DISTRAIN_LOG_DIR": str(logs),
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
    if spec.max_restarts:  # restarted workers must not meet the last round's store keys
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    if spec.framework == "tensorflow":
        return _tf_plan(spec, payload, directory, env, list(ports) or free_ports(spec.nodes))
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
            "-m", entry, payload_path,
        )  # fmt: skip
        nodes.append(NodeLaunch(node, argv, env, str(logs / f"agent-{node}.log")))
    notes: tuple[str, ...] = ()
    if spec.dist_backend == "nccl":
        notes = ("note: nccl needs CUDA; without it the workers fall back to gloo",)
    return LocalPlan(
        spec, payload, str(directory), endpoint, mode, tuple(nodes), len(payload.data),
        payload.describe(), notes,
    )  # fmt: skip


def _tf_plan(
    spec: JobSpec, payload: Payload, directory: Path, env: dict[str, str], ports: list[int]
) -> LocalPlan:
    """One fresh worker process per node, each with its task's ``TF_CONFIG``."""
    if len(set(ports)) != spec.nodes:
        raise ValueError(f"a TensorFlow job of {spec.nodes} nodes needs as many distinct ports")
    logs = jobdir.logs_dir(directory)
    cluster = {"worker": [f"{LOOPBACK}:{p}" for p in ports]}
    nodes = []
    for node in range(spec.nodes):
        config = {"cluster": cluster, "task": {"type": "worker", "index": node}}
        node_env = {
            **env, "TF_CONFIG": json.dumps(config, separators=(",", ":")),
            "RANK": str(node), "WORLD_SIZE": str(spec.nodes), "GROUP_RANK": str(node),
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        }  # fmt: skip
        argv = (str(directory / "payload.pkl"),)
        log = str(logs / f"agent-{node}.log")
        nodes.append(NodeLaunch(node, argv, node_env, log, module=WORKER_MODULE))
    return LocalPlan(
        spec, payload, str(directory), ",".join(cluster["worker"]), "exec", tuple(nodes),
        len(payload.data), payload.describe(),
    )  # fmt: skip


def job_processes(pgid: int | None, roots: list[int]) -> list[psutil.Process]:
    """Members of process group ``pgid``, the ``roots``, and all their descendants."""
    found: dict[int, psutil.Process] = {}
    if pgid:
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == pgid:
                    found[proc.pid] = proc
            except (OSError, psutil.Error):
                continue
    for pid in roots:
        try:
            found.setdefault(pid, psutil.Process(pid))
        except psutil.Error:
            continue
    for proc in list(found.values()):
        try:
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def terminate(pgid: int | None, roots: list[int], grace: float = KILL_GRACE_SECONDS) -> int:
    """SIGTERM every process of a job, SIGKILL what is left after ``grace``; count them."""
    procs = job_processes(pgid, roots)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    # Late children (a worker forked while we were signalling) are caught here.
    alive = list({p.pid: p for p in alive + job_processes(pgid, [])}.values())
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return len(procs)


class LogTailer:
    """Reads new complete lines from a job's log files and turns them into events."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}

    def poll(self, final: bool = False) -> list[ev.Event]:
        """Events for lines written since the last poll (all remaining when ``final``)."""
        out: list[ev.Event] = []
        if not self.logs.is_dir():
            return out
        for path in sorted(self.logs.iterdir()):
            name = path.name
            match = jobdir.RANK_LOG_RE.match(name)
            if match is None and not name.startswith("agent-"):
                continue
            rank = int(match.group(1)) if match else None
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(name, 0))
                    data = fh.read()
            except OSError:
                continue
            if not data and not (final and self.partial.get(name)):
                continue
            self.offsets[name] = self.offsets.get(name, 0) + len(data)
            data = self.partial.pop(name, b"") + data
            lines = data.split(b"\n")
            rest = lines.pop()
            if rest:
                if final:
                    lines.append(rest)
                else:
                    self.partial[name] = rest
            now = time.time()
            for raw in lines:
                event = ev.parse_line(raw.decode("utf-8", "replace"), rank, now)
                if rank is None:
                    event.fields["source"] = name[: -len(".log")]
                out.append(event)
        return out


class LocalRun(Submission):
    """A local job followed by this process: starts agents, tails logs, decides the end."""

    def __init__(
        self,
        plan: LocalPlan,
        sink: EventSink,
        launcher: Launcher | None,
        notebook: str | None = None,
    ) -> None:
        self.plan = plan
        self.notebook = notebook
        self.spec = plan.spec
        self.dir = Path(plan.job_dir)
        self.sink = sink
        self.launcher = launcher
        self.agents: list[ProcessHandle | Any] = []
        self.pgid: int | None = None
        self._stop_reason: str | None = None
        self._done = threading.Event()
        self._state: dict[str, Any] = {}
        self._thread = threading.Thread(
            target=self._run, name=f"distrain-{self.spec.name}", daemon=True
        )

    # -- Submission --------------------------------------------------------
    def start(self) -> None:
        """Write the initial state and start following the job."""
        self._emit(ev.job_event("Pending", "Submitted", f"{self.spec.world_size} ranks"))
        self._thread.start()

    def stop(self, reason: str = "stopped by user") -> None:
        """Ask the job to end (returns at once)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the terminal state."""
        return self._done.wait(timeout)

    # -- internals ---------------------------------------------------------
    def _emit(self, event: ev.Event) -> None:
        if event.kind in ev.BACKEND_KINDS:
            with open(self.dir / "events.jsonl", "a") as fh:
                fh.write(ev.to_json(event) + "\n")
            if event.kind == "job":
                self._write_state(
                    state=event.fields["state"],
                    reason=event.fields["reason"],
                    message=event.fields["message"],
                )
        self.sink(event)

    def _write_state(self, **changes: Any) -> None:
        spec = self.spec
        if not self._state:
            self._state = {
                "name": spec.name, "backend": "local", "nodes": spec.nodes,
                "nproc": spec.nproc, "world_size": spec.world_size, "created": time.time(),
                "framework": spec.framework,
                "owner_pid": os.getpid(), "mode": self.plan.mode,
                "launcher_pid": self.launcher.pid if self.launcher else None,
                "rdzv_endpoint": self.plan.rdzv_endpoint, "timeout": spec.timeout,
                "notebook": self.notebook,
            }  # fmt: skip
        self._state.update(changes)
        if changes.get("state") in ev.TERMINAL_STATES:
            self._state["ended"] = time.time()
        jobdir.write_json_atomic(self.dir / "state.json", self._state)

    def _start_agents(self) -> None:
        env = dict(os.environ)
        for node in self.plan.nodes:
            node_env = {**env, **node.env}
            if self.pgid:
                node_env["DISTRAIN_PGID"] = str(self.pgid)
            handle: ProcessHandle | Any
            if self.launcher is not None:
                node_env["DISTRAIN_LAUNCHER"] = self.launcher.socket_path
                handle = self.launcher.request({
                    "op": "agent", "argv": list(node.argv), "env": node_env,
                    "cwd": os.getcwd(), "pgid": self.pgid or 0, "log": node.log,
                })  # fmt: skip
                if self.pgid is None:
                    self.pgid = handle.pgid
            else:
                handle = _ExecAgent(node, node_env, self.pgid or 0)
                if self.pgid is None:
                    self.pgid = handle.pid
            self.agents.append(handle)
            self._write_state(pgid=self.pgid, agents=[a.pid for a in self.agents])

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:  # never leave processes behind on our own bug
            terminate(self.pgid, [a.pid for a in self.agents])
            self._emit(ev.job_event("Failed", "BackendError", f"{type(exc).__name__}: {exc}"))
        finally:
            self._done.set()

    def _follow(self) -> None:
        tailer = LogTailer(jobdir.logs_dir(self.dir))
        started = time.monotonic()
        self._start_agents()
        attempt = 0
        running = False
        failed_at: float | None = None
        first_error = ""
        outcome: tuple[ev.JobState, str, str] | None = None
        while outcome is None:
            for event in tailer.poll():
                if event.kind == "hello":
                    restart = int(event.get("restart", 0))
                    if restart > attempt:
                        attempt = restart
                        self._emit(ev.restart_event(attempt, "workers restarted by torchrun"))
                    if not running:
                        running = True
                        self._emit(ev.job_event("Running", "Started", "all agents rendezvoused"))
                elif event.kind == "error" and not first_error:
                    first_error = f"rank {event.rank}: {event.get('type')}: {event.get('message')}"
                    if self.spec.max_restarts == 0:
                        failed_at = time.monotonic()
                self.sink(event)
            codes = [a.poll() for a in self.agents]
            if (self.dir / "stop").exists() and self._stop_reason is None:
                self._stop_reason = "stop requested"
            if self._stop_reason is not None:
                outcome = ("Stopped", "Stopped", self._stop_reason)
            elif all(c is not None for c in codes):
                if all(c == 0 for c in codes):
                    outcome = ("Succeeded", "Succeeded", f"{self.spec.world_size} ranks done")
                else:
                    outcome = ("Failed", "WorkerFailed", first_error or _agent_failure(codes))
            elif any(c not in (None, 0) for c in codes):
                outcome = ("Failed", "WorkerFailed", first_error or _agent_failure(codes))
            elif failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_SECONDS:
                outcome = ("Failed", "WorkerFailed", first_error)
            elif self.spec.timeout and time.monotonic() - started > self.spec.timeout:
                outcome = ("Failed", "Timeout", f"did not finish within {self.spec.timeout:g} s")
            else:
                time.sleep(POLL_SECONDS)
        if outcome[0] != "Succeeded" or any(a.poll() is None for a in self.agents):
            terminate(self.pgid, [a.pid for a in self.agents])
        for handle in self.agents:
            handle.poll()
        for event in tailer.poll(final=True):
            self.sink(event)
        self._write_state(exit_codes=[a.poll() for a in self.agents])
        self._emit(ev.job_event(*outcome))


class LocalReplay(Submission):
    """A recorded local job fed again as events (and followed while its owner runs it)."""

    def __init__(self, directory: Path, sink: EventSink) -> None:
        self.dir = directory
        self.sink = sink
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="distrain-replay", daemon=True)

    def start(self) -> None:
        """Start replaying in the background."""
        self._thread.start()

    def stop(self, reason: str = "stopped by user") -> None:
        """Stop the job if it still runs (through its owner)."""
        LocalBackend().stop(self.dir.name)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the replay reached the job's terminal state."""
        return self._done.wait(timeout)

    def _recorded(self) -> list[ev.Event]:
        try:
            lines = (self.dir / "events.jsonl").read_text().splitlines()
        except OSError:
            return []
        return [ev.from_json(line) for line in lines if line.strip()]

    def _run(self) -> None:
        try:
            tailer = LogTailer(jobdir.logs_dir(self.dir))
            recorded = self._recorded()
            final = [
                e for e in recorded if e.kind == "job" and e.get("state") in ev.TERMINAL_STATES
            ]
            for event in recorded:
                if event not in final:
                    self.sink(event)
            while True:
                for event in tailer.poll():
                    self.sink(event)
                state = jobdir.read_state(self.dir) or {}
                if state.get("state") in ev.TERMINAL_STATES or not _is_live(state):
                    break
                time.sleep(POLL_SECONDS)
            for event in tailer.poll(final=True):
                self.sink(event)
            final = [e for e in self._recorded() if e.kind == "job"
                     and e.get("state") in ev.TERMINAL_STATES]  # fmt: skip
            if final:
                self.sink(final[-1])
            else:
                record = _record(jobdir.read_state(self.dir) or {"name": self.dir.name})
                self.sink(ev.job_event(record.state, "Lost", record.reason))  # type: ignore[arg-type]
        finally:
            self._done.set()


def _agent_failure(codes: list[int | None]) -> str:
    bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
    return "; ".join(
        f"node {i} agent {'killed by signal ' + str(-c) if c < 0 else 'exited with code ' + str(c)}"
        for i, c in bad
        if c is not None
    )


class _ExecAgent:
    """A node agent started as a fresh interpreter (no launcher)."""

    def __init__(self, node: NodeLaunch, env: dict[str, str], pgid: int) -> None:
        import subprocess

        with open(node.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", node.module, *node.argv],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                process_group=pgid,
            )  # fmt: skip
        self.pid = self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()


class LocalBackend(Backend):
    """Jobs as torchrun agents on this machine (see the module docstring)."""

    name = "local"
    capabilities = Capabilities(
        frameworks=frozenset({"pytorch", "tensorflow"}),
        restart_frameworks=frozenset({"pytorch"}),
        checkpoints_on_path=True,
    )

    def __init__(self, mode: str = "fork") -> None:
        if mode not in ("fork", "exec"):
            raise ValueError(f"launch mode must be 'fork' or 'exec', got {mode!r}")
        self.mode = mode

    @classmethod
    def create(cls, **config: Any) -> LocalBackend:
        """``launch_mode``: ``fork`` (warm launcher, the default) or ``exec``."""
        return cls(mode=str(config.get("launch_mode") or "fork"))

    def prewarm(self) -> None:
        """Start the warm launcher now (fork mode), so the first job starts fast."""
        if self.mode == "fork":
            from .launcher import prewarm

            prewarm()

    def checkpoint_dir(self, record: JobRecord) -> str | None:
        """The job directory's ``checkpoints`` folder (where the runtime saves by default)."""
        return str(jobdir.job_dir(record.name) / "checkpoints")

    def job_directory(self, name: str) -> str:
        """The directory where job ``name`` keeps its payload, logs and state."""
        return str(jobdir.job_dir(name))

    def launch_mode(self, spec: JobSpec) -> str:
        """``fork`` or ``exec``; TensorFlow workers always start as fresh interpreters."""
        return "exec" if spec.framework == "tensorflow" else self.mode

    def plan(self, spec: JobSpec, payload: Payload) -> LocalPlan:
        """The launch plan: job directory, port, run id and launch mode, all chosen now.

        In fork mode the warm launcher is made ready here, so the plan says
        ``exec`` when it cannot be used (and ``submit`` then does exactly that).
        """
        mode = self.launch_mode(spec)
        if mode == "fork":
            try:
                shared_launcher().wait_ready()
            except LauncherError:
                mode = "exec"
        run_id = {"DISTRAIN_RUN_ID": os.urandom(6).hex()}  # tells restarts from new submissions
        return build_plan(
            spec, payload, jobdir.job_dir(spec.name), mode=mode, port=free_port(), base_env=run_id
        )

    def submit(self, plan: Plan, sink: EventSink) -> LocalRun:
        """Create the job directory and start the agents of ``plan`` in the background."""
        if not isinstance(plan, LocalPlan):
            raise TypeError(f"the local backend runs LocalPlans, not {type(plan).__name__}")
        spec = plan.spec
        directory = Path(plan.job_dir)
        old = jobdir.read_state(directory)
        if old is not None and _is_live(old):
            raise JobExists(
                f"a local job named {spec.name!r} is still {old.get('state')}; stop it with "
                f"%distrain_stop {spec.name} or choose another --name"
            )
        launcher: Launcher | None = None
        if plan.mode == "fork":
            try:
                launcher = shared_launcher()
                launcher.wait_ready()
            except LauncherError as exc:
                raise BackendError(
                    f"the warm launcher this plan forks from stopped ({exc}); plan the job "
                    "again (it will start fresh interpreters if the launcher cannot run)"
                ) from None
        if directory.exists():
            import shutil

            shutil.rmtree(directory)
        jobdir.logs_dir(directory).mkdir(parents=True)
        (directory / "payload.pkl").write_bytes(plan.payload.data)
        run = LocalRun(plan, sink, launcher, notebook=self.notebook)
        run.start()
        return run

    def attach(self, name: str, sink: EventSink) -> tuple[JobSpec, Submission]:
        """Replay a local job's recorded events and logs; follow it while it still runs."""
        directory = jobdir.job_dir(name)
        state = jobdir.read_state(directory)
        if state is None:
            raise JobNotFound(f"no local job named {name!r}; %distrain_jobs lists them")
        spec = JobSpec(name=name, nodes=int(state.get("nodes", 1)),
                       nproc=int(state.get("nproc", 1)),
                       framework=state.get("framework", "pytorch"))  # fmt: skip
        replay = LocalReplay(directory, sink)
        replay.start()
        return spec, replay

    def list_jobs(self) -> list[JobRecord]:
        """Local jobs recorded under the job root, newest first."""
        out = []
        for directory in jobdir.list_job_dirs():
            state = jobdir.read_state(directory)
            if state is None:
                continue
            out.append(_record(state))
        return out

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        """What the job's ranks printed, from its log files (protocol lines left out)."""
        directory = jobdir.job_dir(name)
        if jobdir.read_state(directory) is None:
            raise JobNotFound(f"no local job named {name!r}; %distrain_jobs lists them")
        files = jobdir.rank_logs(directory)
        if rank is not None:
            if rank not in files:
                raise JobNotFound(
                    f"job {name!r} has no log for rank {rank}; ranks with logs: "
                    f"{', '.join(map(str, files)) or 'none yet'}"
                )
            return "\n".join(jobdir.tail_lines(files[rank], tail, PREFIX))
        lines: list[str] = []
        for r, path in files.items():
            lines.extend(f"[rank {r}] {line}" for line in jobdir.tail_lines(path, tail, PREFIX))
        return "\n".join(lines)

    def stop(self, name: str) -> bool:
        """Stop a job of any owner: mark it, then end its processes."""
        directory = jobdir.job_dir(name)
        state = jobdir.read_state(directory)
        if state is None:
            raise JobNotFound(f"no local job named {name!r}; %distrain_jobs lists them")
        if not _is_live(state):
            return False
        (directory / "stop").touch()
        if not _alive(int(state.get("owner_pid", 0))):
            terminate(state.get("pgid"), list(state.get("agents", [])))
            state.update(state="Stopped", reason="Stopped", message="stop requested",
                         ended=time.time())  # fmt: skip
            jobdir.write_json_atomic(directory / "state.json", state)
        return True


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_live(state: dict[str, Any]) -> bool:
    """A recorded job is live while it is not terminal and its owner still runs."""
    return state.get("state") not in ev.TERMINAL_STATES and _alive(int(state.get("owner_pid", 0)))


def _record(state: dict[str, Any]) -> JobRecord:
    status = str(state.get("state", "Pending"))
    reason = str(state.get("message") or state.get("reason") or "")
    if status not in ev.TERMINAL_STATES and not _alive(int(state.get("owner_pid", 0))):
        status, reason = "Stopped", "its kernel or command exited"
    return JobRecord(
        name=str(state["name"]), backend="local", state=status,
        world_size=int(state.get("world_size", 0)), nodes=int(state.get("nodes", 0)),
        nproc=int(state.get("nproc", 0)), created=float(state.get("created", 0.0)),
        ended=state.get("ended"), reason=reason, owner=str(state.get("owner_pid", "")),
        extra={"notebook": state["notebook"]} if state.get("notebook") else {},
    )  # fmt: skip
