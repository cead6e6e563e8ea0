"""The Backend interface: what every place a job can run provides.

A backend turns a :class:`~jupyter_disttrain.spec.JobSpec` plus a
:class:`~jupyter_disttrain.payload.Payload` into a :class:`Plan` (pure
apart from choosing names and free ports: printable, what ``--dry-run``,
``--export`` and ``disttrain render`` show), and ``submit(plan)`` runs
exactly that plan, reporting everything it observes as
:class:`~jupyter_disttrain.events.Event` objects through a sink (the
torchx ``submit_dryrun`` -> ``schedule`` pattern).

What differs between backends is declared in :class:`Capabilities`,
:attr:`Backend.options` and the optional protocols it implements
(:mod:`.optional`); nothing outside ``backends/`` compares backend names.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import frameworks
from ..events import Event
from ..payload import Payload
from ..spec import JobSpec

EventSink = Callable[[Event], None]


class EventFeed:
    """An :data:`EventSink` that also takes a run of events in one call: what one line
    carried (rank 0's relayed line stands for hundreds of metrics), applied under one lock
    by its receiver ``many(events)``, in order; one event is a run of one (see :func:`deliver`).
    """

    __slots__ = ("many",)

    def __init__(self, many: Callable[[Sequence[Event]], None]) -> None:
        self.many = many

    def __call__(self, event: Event) -> None:
        self.many((event,))


def deliver(sink: EventSink, events: Sequence[Event]) -> None:
    """Hand ``events`` to ``sink`` in order: in one call when it is an :class:`EventFeed`."""
    if isinstance(sink, EventFeed):
        if events:
            sink.many(events)
        return
    for event in events:
        sink(event)


class BackendError(RuntimeError):
    """A backend could not do what was asked; the message says why and what to do."""


class JobNotFound(BackendError):
    """No job of that name exists on the backend."""


class JobExists(BackendError):
    """A job of that name is already running."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; front doors and the service read these, never the name.

    ``remote_workers``: workers run on machines the backend schedules, from an image that
    brings their framework; start-up waits on scheduling and pulls, a control request on
    the machine's agent, and following a job costs requests to the place (so the server
    follows such jobs on request only).
    ``survives_kernel``: a job keeps running when the notebook's kernel exits.
    ``elastic``: ``--elastic MIN:MAX`` node counts.
    ``frameworks``: the ``--framework`` values it runs (``None``: every registered one);
    ask :meth:`runs`.
    ``restart_frameworks``: frameworks whose failed workers it restarts (``--max-restarts``;
    ``None``: those whose own launcher restarts them, :attr:`.Framework.restarts`); ask
    :meth:`restarts`.
    ``checkpoints_on_path``: its jobs' default checkpoint directory is a path this
    machine can read (so the notebook can list a job's checkpoints without a URI).
    ``exports_plans``: its plans are files to apply elsewhere (``--export`` / ``disttrain
    render``).
    ``needs_setup``: usable only once configured (e.g. a kubeconfig); see
    :meth:`Backend.configured`.
    ``phases``: the start-up phases (:data:`~jupyter_disttrain.events.PHASES`) it
    observes; the time-to-first-step timeline shows these. Every backend sees
    ``rendezvous`` and ``first_step`` (the workers' ``hello`` and ``report()``).
    """

    remote_workers: bool = False
    survives_kernel: bool = False
    elastic: bool = False
    frameworks: frozenset[str] | None = None
    restart_frameworks: frozenset[str] | None = None
    checkpoints_on_path: bool = False
    exports_plans: bool = False
    needs_setup: bool = False
    phases: tuple[str, ...] = ("rendezvous", "first_step")

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
class ScopeFacts:
    """What a listing of every job of a scope knows of one beside its state
    (:class:`~.optional.ListsNamespace`); the defaults say "one of this tool's jobs".

    ``foreign``: not started by this tool. ``workload``: the kind of object the job
    is on its backend (``PyTorchJob``, ``TrainJob``; "" where jobs are no objects).
    ``started_by``: what the job's labels say started it. ``progress`` (percent),
    ``eta`` (seconds) and ``reported_metrics`` (name -> number): what the job reports
    of itself on its object, where it does.
    """

    foreign: bool = False
    workload: str = ""
    started_by: str = ""
    progress: int | None = None
    eta: int | None = None
    reported_metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class JobRecord:
    """A job as a listing shows it (possibly from another process or kernel).

    ``facts``: what a scope's listing says of it (:class:`ScopeFacts`); ``extra``:
    what its backend keeps to find it again (labels, a cluster's context);
    ``max_restarts``: the restarts its launcher makes after a failure (``--max-restarts``),
    0 when its backend does not record them.
    """

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
    facts: ScopeFacts = field(default_factory=ScopeFacts)
    max_restarts: int = 0


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
    """A place jobs run: the core every backend provides.

    The core is :meth:`plan` (pure: what ``--dry-run`` shows), :meth:`submit`
    (run exactly that plan and follow it, every observation an event to the
    sink, a terminal ``job`` event last), :meth:`list_jobs`, :meth:`logs`,
    :meth:`stop` and the declared :attr:`capabilities` and :attr:`options`.
    Anything more (following another process's job, listing others' jobs,
    reaching ranks, stacks on request, runtimes, sessions) is an optional
    protocol of :mod:`.optional`, offered by having its methods and asked for
    with ``optional.<FEATURE>.of(backend)`` before use.
    """

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
        return not cls.capabilities.needs_setup

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
    def list_jobs(self) -> list[JobRecord]:
        """Jobs this tool created on this backend, newest first."""

    @abc.abstractmethod
    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        """Text printed by a job's ranks (all ranks, prefixed, when ``rank`` is None)."""

    @abc.abstractmethod
    def stop(self, name: str) -> bool:
        """Stop job ``name`` (also one started elsewhere); False if it was not running."""

    def checkpoint_dir(self, record: JobRecord) -> str | None:
        """Where job ``record`` writes checkpoints by default, readable from here; or None."""
        return None

    def job_record(self, spec: JobSpec, state: str) -> JobRecord:
        """A record of the job this process submits from ``spec``, holding what the optional
        features need to find it (on a cluster: its namespace and context)."""
        return JobRecord(
            spec.name,
            self.name,
            state,
            spec.world_size,
            spec.nodes,
            spec.nproc,
            0.0,
            extra=dict(spec.labels),
            max_restarts=spec.max_restarts,
        )
