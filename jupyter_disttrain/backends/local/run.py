"""A local job's run state machine (LocalRun), its replay for other processes, and stop."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from ... import events as ev
from ...runtime import forkclient
from ...runtime.agent import ENV_OWNER
from ...runtime.launcher_identity import ENV_SYS_PATH
from ..base import (
    EventSink,
    JobNotFound,
    JobRecord,
    Submission,
    deliver,
)
from . import jobdir, netns
from .attempts import Attempts
from .launcher import AnyLauncher, ProcessHandle
from .plan import (
    FAILURE_GRACE_SECONDS,
    POLL_SECONDS,
    LocalPlan,
    NodeLaunch,
)
from .processes import (
    terminate,
)
from .tailer import LogTailer, job_trust


class LocalRun(Submission):
    """A local job followed by this process: starts agents, tails logs, decides the end."""

    def __init__(
        self,
        plan: LocalPlan,
        sink: EventSink,
        launcher: AnyLauncher | None,
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
        # wake(): a byte in a pipe the follow loop selects (made and closed by the loop)
        self._wake_r = self._wake_w = -1
        self._wake_lock = threading.Lock()  # no byte to a closed (or reused) descriptor
        self._state: dict[str, Any] = {}
        self._reaper: subprocess.Popen[bytes] | None = None
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

    def wake(self) -> None:
        """Read the ranks' logs now instead of at the next poll."""
        with self._wake_lock:
            if self._wake_w < 0:
                return  # the job has ended
            try:
                os.write(self._wake_w, b"w")
            except BlockingIOError:
                pass  # bytes are waiting already

    # -- internals ---------------------------------------------------------
    def _emit(self, event: ev.Event) -> None:
        if event.kind in ev.BACKEND_KINDS:
            with jobdir.open_private(self.dir / "events.jsonl", "a") as fh:
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
                "name": spec.name,
                "backend": "local",
                "nodes": spec.nodes,
                "nproc": spec.nproc,
                "world_size": spec.world_size,
                "created": time.time(),
                "framework": spec.framework,
                "owner_pid": os.getpid(),
                "mode": self.plan.mode,
                "launcher_pid": self.launcher.pid if self.launcher else None,
                "rdzv_endpoint": self.plan.rdzv_endpoint,
                "timeout": spec.timeout,
                "max_restarts": spec.max_restarts,
                "notebook": self.notebook,
                "labels": dict(spec.labels),
                "checkpoint_dir": spec.checkpoint_dir,
            }
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
                node_env[forkclient.ENV_LAUNCHER] = self.launcher.socket_path
                node_env.setdefault(ENV_SYS_PATH, json.dumps(sys.path))  # the owner's
                handle = self.launcher.request(
                    {
                        "op": "agent",
                        "argv": list(node.argv),
                        "env": node_env,
                        "cwd": os.getcwd(),
                        "pgid": self.pgid or 0,
                        "log": node.log,
                    }
                )
                if self.pgid is None:
                    self.pgid = handle.pgid
            else:  # no launcher watches the owner: each agent does (see runtime/agent.py)
                node_env[ENV_OWNER] = str(os.getpid())
                handle = _ExecAgent(node, node_env, self.pgid or 0, self.plan.prefix(node.node))
                if self.pgid is None:
                    self.pgid = handle.pid
            self.agents.append(handle)
            self._write_state(pgid=self.pgid, agents=[a.pid for a in self.agents])

    def _run(self) -> None:
        with self._wake_lock:
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_w, False)
        try:
            self._isolate()
            self._follow()
        except BaseException as exc:  # never leave processes behind on our own bug
            terminate(self.pgid, [a.pid for a in self.agents])
            self._emit(ev.job_event("Failed", "BackendError", f"{type(exc).__name__}: {exc}"))
        finally:
            self._release()
            with self._wake_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1
            self._done.set()

    def _nap(self) -> None:
        """Wait until the next poll: ``POLL_SECONDS``, or less when :meth:`wake` is called
        or a forked agent ends (the launcher's connection for it speaks)."""
        ends = [
            a.conn.fileno()
            for a in self.agents
            if isinstance(a, ProcessHandle) and a.code is None and not a.eof
        ]
        ready, _, _ = select.select([self._wake_r, *ends], [], [], POLL_SECONDS)
        if self._wake_r in ready:
            os.read(self._wake_r, 64)

    def _isolate(self) -> None:
        """Make the nodes' network (``--network isolated``), its reaper watching this process."""
        net = self.plan.network
        if net is None:
            return
        netns.claim(net)
        self._reaper = netns.start_reaper(net, str(jobdir.logs_dir(self.dir) / "network.log"))
        self._write_state(network=dataclasses.asdict(net))
        netns.setup(net)

    def _release(self) -> None:
        """Remove the nodes' network: its reaper does, once told (the processes ended)."""
        if self._reaper is None:
            return
        assert self._reaper.stdin is not None
        self._reaper.stdin.close()
        try:
            self._reaper.wait(timeout=120)
        except subprocess.TimeoutExpired:  # it goes on removing; say why the job took long
            print(
                f"distrain: job {self.spec.name}'s network is still being removed", file=sys.stderr
            )

    def _follow(self) -> None:
        trust = ev.Trust.of(self.plan.payload.key, self.spec.nodes, self.spec.nproc)
        tailer = LogTailer(jobdir.logs_dir(self.dir), trust)
        started = time.monotonic()
        self._start_agents()
        attempts = Attempts()
        running = False
        failed_at: float | None = None
        first_error = ""
        done: set[int] = set()  # ranks that finished cleanly in the current attempt
        outcome: tuple[ev.JobState, str, str] | None = None
        while outcome is None:
            # the agents' exits first, then the logs: every line a rank wrote before its
            # agent exited is read before that exit is judged (a done line, say)
            codes = [a.poll() for a in self.agents]
            polled = tailer.poll()
            for rank, t in tailer.new_ranks():  # a worker creates its rank log as it starts
                self._emit(ev.phase_event("started", "done", [rank], f"rank {rank} started", t))
            for event in polled:
                if event.kind == "done" and event.rank is not None:
                    done.add(event.rank)
                if event.kind == "hello":
                    restart = attempts.restart(event)
                    if restart is not None:
                        done.clear()
                        self._emit(restart)
                    if not running:
                        running = True
                        self._emit(ev.job_event("Running", "Started", "all agents rendezvoused"))
                elif event.kind == "error" and not first_error:
                    first_error = f"rank {event.rank}: {event.get('type')}: {event.get('message')}"
                    if self.spec.max_restarts == 0:
                        failed_at = time.monotonic()
                self.sink(event)
            if (self.dir / "stop").exists() and self._stop_reason is None:
                self._stop_reason = "stopped by user"  # the stop file: a door's Stop
            if self._stop_reason is not None:
                outcome = ("Stopped", "Stopped", self._stop_reason)
            elif all(c is not None for c in codes):
                if all(c == 0 for c in codes):
                    outcome = ("Succeeded", "Succeeded", f"{self.spec.world_size} ranks done")
                elif len(done) >= self.spec.world_size and not first_error:
                    outcome = ("Succeeded", "Succeeded", self._died_after_done(codes))
                else:
                    outcome = ("Failed", "WorkerFailed", first_error or _agent_failure(codes))
            elif any(c not in (None, 0) for c in codes) and len(done) < self.spec.world_size:
                outcome = ("Failed", "WorkerFailed", first_error or _agent_failure(codes))
            elif failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_SECONDS:
                outcome = ("Failed", "WorkerFailed", first_error)
            elif self.spec.timeout and time.monotonic() - started > self.spec.timeout:
                outcome = ("Failed", "Timeout", f"did not finish within {self.spec.timeout:g} s")
            else:
                self._nap()
        if outcome[0] != "Succeeded" or any(a.poll() is None for a in self.agents):
            terminate(self.pgid, [a.pid for a in self.agents])
        for handle in self.agents:
            handle.poll()
        for event in tailer.poll(final=True):
            self.sink(event)
        self._write_state(exit_codes=[a.poll() for a in self.agents])
        self._emit(ev.job_event(*outcome))

    def _died_after_done(self, codes: list[int | None]) -> str:
        """The end message of a job whose every rank finished, though a process died after."""
        logs = jobdir.logs_dir(self.dir)
        deaths = []
        for node, code in enumerate(codes):
            if code in (None, 0):
                continue
            try:
                text = (logs / f"agent-{node}.log").read_text(errors="replace")
            except OSError:
                text = ""
            found = [
                f"rank {r} ({sig or f'exit code {c}'})" for r, c, sig in _AGENT_EXIT.findall(text)
            ]
            deaths.extend(found or [f"node {node} agent (exit code {code})"])
        return (
            f"{self.spec.world_size} ranks done; warning: {', '.join(deaths)} died after "
            "finishing (logs kept)"
        )


#: torchrun's report of a failed worker: its rank, exit code and signal name.
_AGENT_EXIT = re.compile(
    r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG\w+)\))?\s*$", re.M
)


class LocalReplay(Submission):
    """A recorded local job fed again as events (and followed while its owner runs it)."""

    def __init__(self, directory: Path, sink: EventSink) -> None:
        self.dir = directory
        self.sink = sink
        self._done = threading.Event()
        self._detached = threading.Event()
        self._thread = threading.Thread(target=self._run, name="distrain-replay", daemon=True)

    def start(self) -> None:
        """Start replaying in the background."""
        self._thread.start()

    def stop(self, reason: str = "stopped by user") -> None:
        """Stop the job if it still runs (through its owner)."""
        stop_run(self.dir)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the replay reached the job's terminal state."""
        return self._done.wait(timeout)

    def detach(self) -> None:
        """Stop reading the job's files; the job runs on."""
        self._detached.set()

    def _recorded(self) -> list[ev.Event]:
        try:
            lines = (self.dir / "events.jsonl").read_text().splitlines()
        except OSError:
            return []
        return [ev.from_json(line) for line in lines if line.strip()]

    def _run(self) -> None:
        try:
            state = jobdir.read_state(self.dir) or {}
            shape = int(state.get("nodes", 1)), int(state.get("nproc", 1))
            tailer = LogTailer(jobdir.logs_dir(self.dir), job_trust(self.dir, *shape))
            recorded = self._recorded()
            final = [
                e for e in recorded if e.kind == "job" and e.get("state") in ev.TERMINAL_STATES
            ]
            for event in recorded:
                if event not in final:
                    self.sink(event)
            while True:
                deliver(self.sink, tailer.poll())
                state = jobdir.read_state(self.dir) or {}
                if state.get("state") in ev.TERMINAL_STATES or not is_live(state):
                    break
                if self._detached.wait(POLL_SECONDS):
                    return
            deliver(self.sink, tailer.poll(final=True))
            final = [
                e
                for e in self._recorded()
                if e.kind == "job" and e.get("state") in ev.TERMINAL_STATES
            ]
            if final:
                self.sink(final[-1])
            else:
                record = state_record(jobdir.read_state(self.dir) or {"name": self.dir.name})
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

    def __init__(
        self, node: NodeLaunch, env: dict[str, str], pgid: int, prefix: tuple[str, ...] = ()
    ) -> None:
        with jobdir.open_private(node.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", node.module, *node.argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=pgid,
            )
        self.pid = self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_live(state: dict[str, Any]) -> bool:
    """A recorded job is live while it is not terminal and its owner still runs."""
    return state.get("state") not in ev.TERMINAL_STATES and _alive(int(state.get("owner_pid", 0)))


def state_record(state: dict[str, Any]) -> JobRecord:
    """The listing row of a job's ``state.json``; fields it lacks read as unknown (a job
    starting, or a file from another version). Raises ValueError or TypeError when a field
    holds something of the wrong kind."""
    status = str(state.get("state", "Pending"))
    reason = str(state.get("message") or state.get("reason") or "")
    if status not in ev.TERMINAL_STATES and not _alive(int(state.get("owner_pid", 0))):
        status, reason = "Stopped", "its kernel or command exited"
    return JobRecord(
        name=str(state.get("name", "")),
        backend="local",
        state=status,
        world_size=int(state.get("world_size", 0)),
        nodes=int(state.get("nodes", 0)),
        nproc=int(state.get("nproc", 0)),
        created=float(state.get("created", 0.0)),
        ended=state.get("ended"),
        reason=reason,
        owner=str(state.get("owner_pid", "")),
        max_restarts=int(state.get("max_restarts", 0)),
        extra={
            **({"notebook": state["notebook"]} if state.get("notebook") else {}),
            **dict(state.get("labels") or {}),
        },
    )


def stop_job(name: str) -> bool:
    """Stop local job ``name`` of any owner: mark it, then end its processes.

    False when it is not running; :class:`JobNotFound` when there is no such job.
    """
    directory = jobdir.job_dir(name)
    if jobdir.read_state(directory) is None:
        raise JobNotFound(f"no local job named {name!r}; %distrain_jobs lists them")
    return stop_run(directory)


def stop_run(directory: Path) -> bool:
    """Stop the run of a job recorded in ``directory`` (see :func:`stop_job`)."""
    state = jobdir.read_state(directory)
    if state is None:
        return False
    if not is_live(state):
        return False
    (directory / "stop").touch()
    if not _alive(int(state.get("owner_pid", 0))):
        terminate(state.get("pgid"), list(state.get("agents", [])))
        state.update(
            state="Stopped", reason="Stopped", message="stopped by user", ended=time.time()
        )
        jobdir.write_json_atomic(directory / "state.json", state)
    return True
