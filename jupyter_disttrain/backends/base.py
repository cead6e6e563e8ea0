"""The Backend interface: what every place a job can run provides.

A backend turns a :class:`~jupyter_disttrain.spec.JobSpec` plus a
:class:`~jupyter_disttrain.payload.Payload` into a :class:`Plan` (pure
apart from choosing names and free ports: printable, what ``--dry-run``,
``--export`` and ``disttrain render`` show), and ``submit(plan)`` runs
exactly that plan, reporting everything it observes as
:class:`~jupyter_disttrain.events.Event` objects through a sink (the
torchx ``submit_dryrun`` -> ``schedule`` pattern).

What differs between backends is declared in :class:`Capabilities` and
:attr:`Backend.options`; nothing outside ``backends/`` compares backend names.
"""

from __future__ import annotations

import abc
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import frameworks
from ..events import Event
from ..payload import Payload
from ..spec import JobSpec

EventSink = Callable[[Event], None]


class BackendError(RuntimeError):
    """A backend could not do what was asked; the message says why and what to do."""


class JobNotFound(BackendError):
    """No job of that name exists on the backend."""


class JobExists(BackendError):
    """A job of that name is already running."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; front doors and the service read these, never the name.

    ``has_pods``: workers run in pods (scheduling, image pulls, pod events).
    ``survives_kernel``: a job keeps running when the notebook's kernel exits.
    ``elastic``: ``--elastic MIN:MAX`` node counts.
    ``frameworks``: the ``--framework`` values it runs (``None``: every registered one);
    ask :meth:`runs`.
    ``restart_frameworks``: frameworks whose failed workers it restarts (``--max-restarts``;
    ``None``: those whose own launcher restarts them, :attr:`.Framework.restarts`); ask
    :meth:`restarts`.
    ``checkpoints_on_path``: its jobs' default checkpoint directory is a path this
    machine can read (so the notebook can list a job's checkpoints without a URI).
    ``renders_manifests``: ``--export`` / ``disttrain render`` produce files to apply elsewhere.
    ``needs_configuration``: usable only once configured (e.g. a kubeconfig); see
    :meth:`Backend.configured`.
    ``lists_runtimes``: :meth:`Backend.runtimes` lists training runtimes (Kubeflow Trainer).
    ``stacks_on_request``: :meth:`Backend.request_stacks` asks a running job's ranks for
    their stacks (every backend's ranks send them by themselves at a hang).
    ``controls_ranks``: :meth:`Backend.send_control` leaves a running job's ranks a
    signed request (pause at the next cell line, new breakpoints in the running cell).
    ``phases``: the start-up phases (:data:`~jupyter_disttrain.events.PHASES`) it
    observes; the time-to-first-step timeline shows these. Every backend sees
    ``rendezvous`` and ``first_step`` (the workers' ``hello`` and ``report()``).
    ``sessions``: it can run a live session (ranks kept alive between cells) and
    :meth:`Backend.connect` reaches its rank 0.
    ``reaches_ranks``: :meth:`Backend.connect_rank` reaches a port of any rank's node
    (a paused rank's debugger) and :meth:`Backend.job_key` gives a job's key.
    """

    has_pods: bool = False
    survives_kernel: bool = False
    elastic: bool = False
    frameworks: frozenset[str] | None = None
    restart_frameworks: frozenset[str] | None = None
    checkpoints_on_path: bool = False
    renders_manifests: bool = False
    needs_configuration: bool = False
    lists_runtimes: bool = False
    stacks_on_request: bool = False
    controls_ranks: bool = False
    phases: tuple[str, ...] = ("rendezvous", "first_step")
    sessions: bool = False
    reaches_ranks: bool = False

    def runs(self, name: str) -> bool:
        """Whether it runs jobs of the registered framework ``name``."""
        return frameworks.known(name) and (self.frameworks is None or name in self.frameworks)

    def restarts(self, name: str) -> bool:
        """Whether it restarts failed workers of framework ``name`` (``--max-restarts``)."""
        if not self.runs(name):
            return False
        if self.restart_frameworks is None:
            return frameworks.framework(name).restarts
        return name in self.restart_frameworks

    def framework_names(self) -> tuple[str, ...]:
        """The registered frameworks it runs, the default first."""
        return tuple(name for name in frameworks.names() if self.runs(name))


@dataclass(frozen=True)
class BackendOption:
    """A command-line option a backend declares (``--flag``), carried in ``JobSpec.options``.

    ``key`` is the option's name with ``_`` (``node_selector`` for
    ``--node-selector``). ``repeatable`` options may be given more than once;
    ``switch`` options take no value (present means ``"true"``); ``optional``
    options may be given alone (meaning ``"true"``) or with a value.
    """

    key: str
    help: str
    repeatable: bool = False
    switch: bool = False
    optional: bool = False
    metavar: str = "VALUE"

    @property
    def flag(self) -> str:
        """The option as typed: ``--node-selector``."""
        return "--" + self.key.replace("_", "-")


@dataclass(frozen=True)
class JobRecord:
    """A job as a listing shows it (possibly from another process or kernel)."""

    name: str
    backend: str
    state: str
    world_size: int
    nodes: int
    nproc: int
    created: float
    ended: float | None = None
    reason: str = ""
    owner: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeRecord:
    """A training runtime a backend offers (a Kubeflow (Cluster)TrainingRuntime)."""

    name: str
    scope: str  # "cluster" or a namespace
    framework: str
    image: str
    nodes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Plan(abc.ABC):
    """Everything ``submit`` will do for one job, decided before anything runs.

    ``str(plan)`` is what ``--dry-run`` prints; :meth:`export` is the text
    ``--export`` writes (``None`` when the backend has nothing to export).
    A plan is submitted at most once.
    """

    spec: JobSpec
    payload: Payload

    @abc.abstractmethod
    def __str__(self) -> str:
        """The plan as a user reads it."""

    def export(self) -> str | None:
        """Files to apply elsewhere (Kubernetes YAML), or ``None``."""
        return None


class Submission(abc.ABC):
    """A job this process submitted (or attached to) and follows."""

    @abc.abstractmethod
    def stop(self, reason: str = "stopped by user") -> None:
        """Ask the job to end; returns at once. Every process of the job ends."""

    @abc.abstractmethod
    def join(self, timeout: float | None = None) -> bool:
        """Wait until the backend has reported the terminal state; True when it has."""

    def detach(self) -> None:
        """Stop following (the job itself runs on); no more events after it returns soon."""
        return None

    def remove(self) -> None:
        """Remove what the backend keeps of the ended job (a cluster's job object with its
        pods and payload), where it keeps it; nothing by default."""
        return None

    def wake(self) -> None:
        """Read what the job wrote now rather than at the next poll (where the backend polls)."""
        return None


class Backend(abc.ABC):
    """A place jobs run. Implementations document where they differ."""

    name: ClassVar[str] = "?"
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: Options only this backend understands; they travel in ``JobSpec.options``.
    options: ClassVar[tuple[BackendOption, ...]] = ()
    #: The notebook that submits jobs (a path), recorded with each job when known.
    notebook: str | None = None

    @classmethod
    def create(cls, **config: Any) -> Backend:
        """An instance from front-door settings (e.g. ``launch_mode``); unknown keys are ignored."""
        return cls()

    @classmethod
    def configured(cls) -> bool:
        """True when this backend can be used here without more set-up."""
        return not cls.capabilities.needs_configuration

    def prewarm(self) -> None:
        """Start, in the background, what makes the first job start faster (optional)."""
        return None

    def check(self, spec: JobSpec) -> None:
        """Raise :class:`~jupyter_disttrain.spec.SpecError` for what this backend cannot run."""
        return None

    def payload_extra(self, spec: JobSpec) -> dict[str, Any]:
        """Fields this backend adds to the payload (e.g. an image that would work)."""
        return {}

    @abc.abstractmethod
    def plan(self, spec: JobSpec, payload: Payload) -> Plan:
        """The exact launch request for ``spec``; writes and starts nothing."""

    @abc.abstractmethod
    def submit(self, plan: Plan, sink: EventSink) -> Submission:
        """Run exactly ``plan`` and report its events to ``sink`` from a background thread.

        The sink receives a terminal ``job`` event last. Raises
        :class:`JobExists` when a job of that name is running.
        """

    @abc.abstractmethod
    def attach(self, name: str, sink: EventSink) -> tuple[JobSpec, Submission]:
        """Follow an existing job from the start of its event stream.

        Raises :class:`JobNotFound` when there is no such job.
        """

    @abc.abstractmethod
    def list_jobs(self) -> list[JobRecord]:
        """Jobs this tool created on this backend, newest first."""

    def list_namespace(self) -> list[JobRecord]:
        """Every job of this backend's scope, whoever started it, newest first (``--all``).

        A record's ``extra`` may say ``foreign`` (True: not started by this
        tool), ``kubeflow_kind``, ``started_by``, ``progress`` (percent), ``eta``
        (seconds) and ``reported_metrics`` (name -> number) as the job reports them.
        Default: :meth:`list_jobs`.
        """
        return self.list_jobs()

    def watch_namespace(self) -> Callable[[], None] | None:
        """Keep :meth:`list_namespace` current from long-lived watches (a few, not one per
        job) instead of asking at each call; the function that ends them, or None when the
        backend has no such watches (the default)."""
        return None

    def may_stop(self, name: str) -> bool | None:
        """Whether this user may stop job ``name`` (None: the backend cannot tell)."""
        return None

    @abc.abstractmethod
    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        """Text printed by a job's ranks (all ranks, prefixed, when ``rank`` is None)."""

    @abc.abstractmethod
    def stop(self, name: str) -> bool:
        """Stop job ``name`` (also one started elsewhere); False if it was not running."""

    def checkpoint_dir(self, record: JobRecord) -> str | None:
        """Where job ``record`` writes checkpoints by default, readable from here; or None."""
        return None

    def request_stacks(self, name: str) -> str:
        """Ask every rank of job ``name`` for its stacks; return the request's id.

        Only where ``capabilities.stacks_on_request``; the ranks answer with
        ``stacks`` events carrying that id. Every backend's jobs send their
        stacks by themselves when they hang (``--hang-after``).
        """
        raise BackendError(
            f"the {self.name} backend cannot ask a running job for its stacks; its jobs send "
            "them when they hang (--hang-after SECONDS)"
        )

    def send_control(self, name: str, control: str, body: str) -> int:
        """Leave running job ``name``'s ranks request ``body`` of ``control`` (one of
        :data:`~.runtime.control.CONTROLS`), signed with the job's key; return its number.

        Only where ``capabilities.controls_ranks``; rank 0 reads it and passes it on
        (:mod:`~.runtime.control`).
        """
        raise BackendError(
            f"the {self.name} backend cannot reach a running job's ranks ({control}); put "
            "breakpoint() in the cell, or set breakpoints in its gutter before it runs"
        )

    def job_record(self, spec: JobSpec, state: str) -> JobRecord:
        """A record of the job this process submits from ``spec``, holding what
        :meth:`connect` needs to find it (on a cluster: its namespace and context)."""
        return JobRecord(
            spec.name,
            self.name,
            state,
            spec.world_size,
            spec.nodes,
            spec.nproc,
            0.0,
            extra=dict(spec.labels),
        )

    def connect(self, record: JobRecord, port: int, timeout: float = 60.0) -> socket.socket:
        """A connected stream socket to ``port`` of job ``record``'s rank 0 (a live session).

        Only where ``capabilities.sessions``. Waits up to ``timeout`` seconds for
        rank 0 to run and accept; raises :class:`BackendError` naming the problem
        (job gone, port refused, timeout) and the fix.
        """
        raise BackendError(
            f"the {self.name} backend cannot run live sessions; run the cell as a job "
            "(%%distrain without --session) or choose a backend that can"
        )

    def connect_rank(
        self, record: JobRecord, node: int, port: int, timeout: float = 30.0
    ) -> socket.socket:
        """A connected stream socket to ``port`` (on 127.0.0.1 there) of node ``node`` of job
        ``record`` (a paused rank's debugger). Only where ``capabilities.reaches_ranks``;
        raises :class:`BackendError` naming the problem and the fix."""
        raise BackendError(
            f"the {self.name} backend cannot reach a rank's debugger; run the job on a backend "
            "that can (local, kubernetes)"
        )

    def stored_key(self, name: str) -> bytes | None:
        """The key of job ``name`` (see :mod:`..runtime.jobkey`), or None when it is not known
        here. Only where ``capabilities.reaches_ranks``."""
        return None

    def runtimes(self) -> list[RuntimeRecord]:
        """Training runtimes offered (only where ``capabilities.lists_runtimes``)."""
        raise BackendError(f"the {self.name} backend has no training runtimes to list")
