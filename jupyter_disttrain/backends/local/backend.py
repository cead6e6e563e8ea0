"""The local backend: N real torchrun node agents on this machine, over loopback.

Each "node" is a torchrun agent doing real c10d rendezvous on 127.0.0.1 and
a free port, with ``--nproc`` workers: the launch path of a cluster, smaller.
Agents and workers are forked from the warm launcher (see
``runtime/zygote.py``) when it is available, otherwise started as fresh
interpreters. Every process of a job is in one process group, or a child of
a member, so stop, timeout, failure and owner exit end all of them.

A framework launched as ``workers`` (:mod:`...frameworks`; TensorFlow) runs
each node as one worker process instead of an agent, told its cluster in the
environment the framework gives (``TF_CONFIG``), workers on free ports of
127.0.0.1; one that is not fork-safe (TensorFlow starts threads when it is
imported) starts fresh interpreters.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import events as ev
from ...frameworks import framework
from ...frameworks.launch import TORCHRUN_LOGS
from ...payload import Payload
from ...plugins import DEFAULT_FRAMEWORK
from ...runtime import control as controls
from ...runtime import hangwatch, jobkey
from ...runtime.env import ENV_RUN_ID
from ...spec import JobSpec
from ...terminal import terminal_lines
from ..base import (
    Backend,
    BackendError,
    BackendOption,
    Capabilities,
    EventSink,
    JobExists,
    JobNotFound,
    JobRecord,
    Plan,
    Submission,
)
from ..loglines import shown_lines
from . import jobdir, netns
from .launcher import AnyLauncher, LauncherError, shared_launcher
from .plan import (
    LocalPlan,
    build_plan,
    free_port,
)
from .run import (
    LocalReplay,
    LocalRun,
    is_live,
    state_record,
    stop_job,
)
from .tailer import job_trust


def loopback(port: int, timeout: float, what: str, hint: str = "") -> socket.socket:
    """A connection to ``127.0.0.1:port``; :class:`BackendError` naming ``what`` otherwise."""
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError as exc:
        raise BackendError(
            f"cannot reach {what} on 127.0.0.1:{port}: {exc.strerror or exc}{hint}"
        ) from None


class LocalBackend(Backend):
    """Jobs as torchrun agents on this machine (see the module docstring)."""

    name = "local"
    capabilities = Capabilities(
        # every registered framework; restarts where torchrun agents restart the workers
        checkpoints_on_path=True,
        phases=("started", "rendezvous", "first_step"),
    )
    options = (
        BackendOption(
            "network",
            "local: `--network isolated` runs each node in its own network namespace, host "
            "name and address (eth0) on a bridge, as pods are (root only); default loopback",
            metavar="isolated",
        ),
    )

    def __init__(self, mode: str = "fork", linger: float | None = None) -> None:
        if mode not in ("fork", "exec"):
            raise ValueError(f"launch mode must be 'fork' or 'exec', got {mode!r}")
        self.mode = mode
        #: Seconds a launcher this process starts lingers for the next (None: its default).
        self.linger = linger

    @classmethod
    def create(cls, **config: Any) -> LocalBackend:
        """``launch_mode``: ``fork`` (warm launcher, the default) or ``exec``; ``linger``:
        seconds a launcher started here waits, idle, for this user's next process."""
        linger = config.get("linger")
        return cls(
            str(config.get("launch_mode") or "fork"), None if linger is None else float(linger)
        )

    def prewarm(self) -> None:
        """Start the warm launcher now (fork mode), so the first job starts fast."""
        if self.mode == "fork":
            from .launcher import prewarm

            prewarm(self.linger)

    def checkpoint_dir(self, record: JobRecord) -> str | None:
        """The job's ``--checkpoint-dir`` as recorded at submission, else its ``checkpoints``."""
        directory = jobdir.job_dir(record.name)
        recorded = (jobdir.read_state(directory) or {}).get("checkpoint_dir")
        return (
            recorded if isinstance(recorded, str) and recorded else str(directory / "checkpoints")
        )

    def request_stacks(self, name: str) -> str:
        """Raise the counter in the job directory's request file; every rank's watch reads it."""
        return f"a{_raise_control(name, hangwatch.REQUEST_FILE, str)}"

    def send_control(self, name: str, control: str, body: str) -> int:
        """Write the next request of ``control`` into the job directory's file of that name
        (rank 0's watch passes it on)."""
        key = self.stored_key(name)
        if key is None:
            raise JobNotFound(f"local job {name!r} has no readable job key to sign a request with")
        return _raise_control(name, control, lambda n: controls.render(n, body, key))

    def connect(self, record: JobRecord, port: int, timeout: float = 60.0) -> socket.socket:
        """Rank 0 runs on this machine: connect to ``127.0.0.1:port`` (of node 0's namespace
        on ``--network isolated``)."""
        return _reach(record, 0, port, timeout, f"rank 0 of session {record.name}", "")

    def connect_rank(
        self, record: JobRecord, node: int, port: int, timeout: float = 30.0
    ) -> socket.socket:
        """Every node runs on this machine: connect to ``127.0.0.1:port`` (inside the node's
        network namespace on ``--network isolated``)."""
        what = f"the debugger of job {record.name} (node {node})"
        return _reach(record, node, port, timeout, what, "; the rank may have resumed or ended")

    def stored_key(self, name: str) -> bytes | None:
        """The key in job ``name``'s directory (None without a readable one)."""
        try:
            key = (jobdir.job_dir(name) / jobkey.KEY_FILE).read_bytes()
        except OSError:
            return None
        return key if len(key) == jobkey.KEY_BYTES else None

    def job_directory(self, name: str) -> str:
        """The directory where job ``name`` keeps its payload, logs and state."""
        return str(jobdir.job_dir(name))

    def view_directory(self, name: str, spec: JobSpec | None = None) -> str:
        """Where job ``name``'s view record goes: its own directory."""
        return self.job_directory(name)

    def launch_mode(self, spec: JobSpec) -> str:
        """``fork`` or ``exec``: ``exec`` for a framework that is not fork-safe (TensorFlow) or
        whose launcher does not fork (one that starts its own ranks)."""
        fw = framework(spec.framework)
        return self.mode if fw.fork_safe and fw.launch.forks else "exec"

    def plan(self, spec: JobSpec, payload: Payload) -> LocalPlan:
        """The launch plan: job directory, port, run id and launch mode, all chosen now.

        In fork mode the warm launcher is made ready here, so the plan says
        ``exec`` when it cannot be used (and ``submit`` then does exactly that).
        """
        network = _network_option(spec)
        mode = "exec" if network else self.launch_mode(spec)
        if mode == "fork":
            try:
                shared_launcher(self.linger).wait_ready()
            except LauncherError:
                mode = "exec"
        run_id = os.urandom(6).hex()  # tells restarts from new submissions
        directory = jobdir.next_run_dir(spec.name)  # never where an earlier run keeps checkpoints
        nodes = _isolated_nodes(spec, run_id) if network else None
        return build_plan(
            spec,
            payload,
            directory,
            mode=mode,
            port=free_port(),
            base_env={ENV_RUN_ID: run_id},
            network=nodes,
        )

    def submit(self, plan: Plan, sink: EventSink) -> LocalRun:
        """Create the job directory and start the agents of ``plan`` in the background."""
        if not isinstance(plan, LocalPlan):
            raise TypeError(f"the local backend runs LocalPlans, not {type(plan).__name__}")
        spec = plan.spec
        directory = Path(plan.job_dir)
        old = jobdir.read_state(jobdir.job_dir(spec.name))
        if old is not None and is_live(old):
            raise JobExists(
                f"a local job named {spec.name!r} is still {old.get('state')}; stop it with "
                f"%distrain_stop {spec.name} or choose another --name"
            )
        launcher: AnyLauncher | None = None
        if plan.mode == "fork":
            try:
                launcher = shared_launcher(self.linger)
                launcher.wait_ready()
            except LauncherError as exc:
                raise BackendError(
                    f"the warm launcher this plan forks from stopped ({exc}); plan the job "
                    "again (it will start fresh interpreters if the launcher cannot run)"
                ) from None
        _make_run_dir(directory, spec.name)
        jobdir.make_private_dirs(jobdir.logs_dir(directory))
        jobdir.make_private_dirs(directory / TORCHRUN_LOGS)  # made by torchrun: 0755
        jobdir.write_private(directory / "payload.pkl", plan.payload.data)
        jobdir.write_private(directory / jobkey.KEY_FILE, plan.payload.key)
        run = LocalRun(plan, sink, launcher, notebook=self.notebook)
        run.start()
        return run

    def attach(self, name: str, sink: EventSink) -> tuple[JobSpec, Submission]:
        """Replay a local job's recorded events and logs; follow it while it still runs."""
        directory = jobdir.job_dir(name)
        state = jobdir.read_state(directory)
        if state is None:
            raise JobNotFound(f"no local job named {name!r}; %distrain_jobs lists them")
        spec = JobSpec(
            name=name,
            nodes=int(state.get("nodes", 1)),
            nproc=int(state.get("nproc", 1)),
            framework=state.get("framework", DEFAULT_FRAMEWORK),
            labels=tuple(dict(state.get("labels") or {}).items()),
            max_restarts=int(state.get("max_restarts", 0)),
        )
        replay = LocalReplay(directory, sink)
        replay.start()
        return spec, replay

    def list_jobs(self) -> list[JobRecord]:
        """Local jobs recorded under the job root, newest first."""
        out = []
        directories = jobdir.list_job_dirs()
        names = jobdir.run_names(directories)  # an earlier run of a name is NAME.K
        for directory in directories:
            state = jobdir.read_state(directory)
            if state is None:
                continue
            try:
                record = state_record(state)
            except (TypeError, ValueError):  # a state file this version cannot read
                continue
            out.append(dataclasses.replace(record, name=names[directory]))
        return out

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        """What the job's ranks printed, from its log files (its own control lines left out).

        A rank's signed error is shown as its traceback (:func:`.loglines.shown_lines`);
        a line that only looks like a control line (not signed with the job's
        key) is printed text and stays.
        """
        directory = jobdir.job_dir(name)
        if jobdir.read_state(directory) is None:
            raise JobNotFound(f"no local job named {name!r}; %distrain_jobs lists them")
        files = jobdir.rank_logs(directory)
        state = jobdir.read_state(directory) or {}
        trust = job_trust(directory, int(state.get("nodes", 1)), int(state.get("nproc", 1)))
        if rank is not None:
            if rank not in files:
                raise JobNotFound(
                    f"job {name!r} has no log for rank {rank}; ranks with logs: "
                    f"{', '.join(map(str, files)) or 'none yet'}"
                )
            return "\n".join(_shown(files[rank], rank, tail, trust))
        lines: list[str] = []
        for r, path in files.items():
            lines.extend(f"[rank {r}] {line}" for line in _shown(path, r, tail, trust))
        return "\n".join(lines)

    def stop(self, name: str) -> bool:
        """Stop a job of any owner: mark it, then end its processes."""
        return stop_job(name)


def _reach(
    record: JobRecord, node: int, port: int, timeout: float, what: str, hint: str
) -> socket.socket:
    """A connection to ``127.0.0.1:port`` of node ``node``: this host's loopback, or the
    loopback of the node's own namespace (``--network isolated``)."""
    state = jobdir.read_state(jobdir.job_dir(record.name)) or {}
    network = state.get("network")
    if not isinstance(network, dict):
        return loopback(port, timeout, what, hint)
    namespace = f"{netns.PREFIX}{network.get('run_id')}-{node}"
    try:
        return netns.connect(namespace, port, timeout)
    except OSError as exc:
        raise BackendError(
            f"cannot reach {what} on 127.0.0.1:{port} in network namespace {namespace}: "
            f"{exc.strerror or exc}{hint}"
        ) from None


def _network_option(spec: JobSpec) -> bool:
    """True for ``--network isolated``; :class:`BackendError` naming the fix when it cannot be."""
    value = dict(spec.options).get("network")
    if value is None or value == "loopback":
        return False
    if value != "isolated":
        raise BackendError(
            f"--network {value}: the local backend knows 'isolated' (each node in its own "
            "network namespace) and 'loopback' (the default); choose one of them"
        )
    fw = framework(spec.framework)
    if not fw.launch.isolates:
        raise BackendError(
            f"--network isolated runs each node's agent in its own namespace, and a {fw.title} "
            "job starts one process per rank instead: leave out --network isolated"
        )
    reason = netns.unavailable()
    if reason:
        raise BackendError(reason)
    return True


def _isolated_nodes(spec: JobSpec, run_id: str) -> netns.NodeNetwork:
    """The job's network, its addresses leased (and networks of gone owners swept first)."""
    netns.sweep()
    hostnames = tuple(f"{spec.name}-node-{n}"[-63:].lstrip("-") for n in range(spec.nodes))
    try:
        return netns.reserve(run_id, hostnames, os.getpid())
    except netns.IsolationError as exc:
        raise BackendError(str(exc)) from None


def _shown(path: Path, rank: int, tail: int | None, trust: ev.Trust | None) -> list[str]:
    """The last ``tail`` lines of ``rank``'s log as a reader sees them (:func:`shown_lines`),
    carriage returns as a terminal shows them (:func:`.terminal.terminal_lines`)."""
    kept = jobdir.tail_lines(path, tail, lambda line: not shown_lines(line, rank, trust))
    lines = ((rank, shown) for line in kept for shown in shown_lines(line, rank, trust))
    return [line for _, line in terminal_lines(lines)]


def _unless_vanished(func: Any, path: str, exc_info: Any) -> None:
    """``rmtree``'s error handler: a file another process removed meanwhile (a record's
    temporary file renamed into place) is gone already; anything else is raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def _make_run_dir(directory: Path, name: str) -> None:
    """Create the run directory a plan chose: replace an earlier run that kept no checkpoint.

    Raise :class:`JobExists` when another run of ``name`` took it, or saved
    checkpoints in it, since the plan was made (nothing is removed then).
    """
    if directory.exists():
        if jobdir.holds_checkpoints(directory):
            raise JobExists(
                f"an earlier run of {name!r} saved checkpoints in {directory} since this job was "
                "planned; they are kept: plan the job again (it gets a directory of its own)"
            )
        shutil.rmtree(directory, onerror=_unless_vanished)
    jobdir.make_private_dirs(directory.parent)
    try:
        os.mkdir(directory, jobdir.DIR_MODE)
    except FileExistsError:
        raise JobExists(
            f"another run of {name!r} started in {directory} since this job was planned; "
            "plan it again"
        ) from None
    os.chmod(directory, jobdir.DIR_MODE)


def _raise_control(name: str, file: str, render: Callable[[int], str]) -> int:
    """Write ``render(N)`` into control ``file`` of local job ``name``, N one more than the
    number it holds; return N."""
    directory = jobdir.job_dir(name)
    if not directory.is_dir():
        raise JobNotFound(f"no local job named {name!r}")
    path = directory / file
    try:
        asked = controls.number_of(path.read_text(encoding="utf-8"))
    except OSError:
        asked = 0
    tmp = directory / f".{file}.tmp"
    jobdir.write_private(tmp, render(asked + 1).encode())
    os.replace(tmp, path)  # a rank reads the old or the new request, never a torn one
    return asked + 1
