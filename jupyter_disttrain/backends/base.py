"""The Backend interface: what every place a job can run provides.

A backend turns a :class:`~jupyter_disttrain.spec.JobSpec` plus a
:class:`~jupyter_disttrain.payload.Payload` into running workers, and reports
everything it observes as :class:`~jupyter_disttrain.events.Event` objects
through a sink. ``dryrun`` returns the exact request ``submit`` would make,
printable, so plans are unit-testable and ``--dry-run`` costs nothing.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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


class Submission(abc.ABC):
    """A job this process submitted and follows."""

    @abc.abstractmethod
    def stop(self, reason: str = "stopped by user") -> None:
        """Ask the job to end; returns at once. Every process of the job ends."""

    @abc.abstractmethod
    def join(self, timeout: float | None = None) -> bool:
        """Wait until the backend has reported the terminal state; True when it has."""


class Backend(abc.ABC):
    """A place jobs run. Implementations document where they differ."""

    name: str = "?"
    #: The notebook that submits jobs (a path), recorded with each job when known.
    notebook: str | None = None

    def payload_extra(self, spec: JobSpec) -> dict[str, Any]:
        """Fields this backend adds to the payload (e.g. an image that would work)."""
        return {}

    @abc.abstractmethod
    def dryrun(self, spec: JobSpec, payload: Payload) -> Any:
        """The exact launch request for ``spec``, printable with ``str()``; runs nothing."""

    @abc.abstractmethod
    def submit(self, spec: JobSpec, payload: Payload, sink: EventSink) -> Submission:
        """Start the job and report its events to ``sink`` from a background thread.

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
