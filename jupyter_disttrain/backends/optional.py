"""What a backend may offer beyond its core: one ``typing.Protocol`` per feature.

A :class:`~.base.Backend` is a small core (plan, submit and follow through
the sink, logs, stop, list, capabilities). Anything else a place can do is
one of the protocols here; a backend offers it by having its methods, and
callers ask :data:`Feature.of` (or :meth:`Feature.has`) before use, so a
backend that lacks one fails with :class:`MissingFeature` naming the backend,
the feature and what to do instead — never an ``AttributeError``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from ..spec import JobSpec
from .base import Backend, BackendError, EventSink, JobRecord, RuntimeRecord, Submission

T = TypeVar("T")


class MissingFeature(BackendError):
    """A backend lacks an optional feature; the message names both and the fix."""

    def __init__(self, backend: str, feature: Feature[Any]) -> None:
        super().__init__(f"the {backend} backend cannot {feature.does}; {feature.fix}")
        self.backend = backend
        self.feature = feature


@runtime_checkable
class Attaches(Protocol):
    """Follow a job this process did not submit (another kernel's, or one that outlived it)."""

    def attach(self, name: str, sink: EventSink) -> tuple[JobSpec, Submission]:
        """Follow job ``name`` from the start of its event stream (the sink gets every event
        again, then new ones while it runs). Raises :class:`~.base.JobNotFound`."""
        ...


@runtime_checkable
class ListsNamespace(Protocol):
    """See every job of the backend's scope, whoever started it (``--all``)."""

    def list_namespace(self) -> list[JobRecord]:
        """Every job of the scope, newest first, each with its :class:`~.base.ScopeFacts`."""
        ...

    def watch_namespace(self) -> Callable[[], None] | None:
        """Keep :meth:`list_namespace` current from a few long-lived watches; the function
        that ends them, or None when there are none."""
        ...

    def may_stop(self, name: str) -> bool | None:
        """Whether this user may stop job ``name`` (None: cannot tell)."""
        ...


@runtime_checkable
class RequestsStacks(Protocol):
    """Ask a running job's ranks for their stacks (every job sends them itself at a hang)."""

    def request_stacks(self, name: str) -> str:
        """Ask every rank of job ``name``; return the id its ``stacks`` events carry."""
        ...


@runtime_checkable
class ControlsRanks(Protocol):
    """Leave a running job's ranks signed requests (pause, new breakpoints)."""

    def send_control(self, name: str, control: str, body: str) -> int:
        """Leave job ``name``'s ranks request ``body`` of ``control`` (one of
        :data:`~..runtime.control.CONTROLS`), signed with the job's key; its number."""
        ...


@runtime_checkable
class RunsSessions(Protocol):
    """Run live sessions (ranks kept alive between cells): reach rank 0 of a job."""

    def connect(self, record: JobRecord, port: int, timeout: float = 60.0) -> socket.socket:
        """A connected stream socket to ``port`` of job ``record``'s rank 0, waiting up to
        ``timeout`` s; :class:`~.base.BackendError` naming the problem otherwise."""
        ...


@runtime_checkable
class ReachesRanks(Protocol):
    """Reach a port of any rank's node (a paused rank's debugger) and know a job's key."""

    def connect_rank(
        self, record: JobRecord, node: int, port: int, timeout: float = 30.0
    ) -> socket.socket:
        """A connected stream socket to ``port`` (127.0.0.1 there) of node ``node``."""
        ...

    def stored_key(self, name: str) -> bytes | None:
        """The key of job ``name`` (:mod:`..runtime.jobkey`), or None when not known here."""
        ...


@runtime_checkable
class ListsRuntimes(Protocol):
    """List the training runtimes the place offers (Kubeflow Trainer)."""

    def runtimes(self) -> list[RuntimeRecord]:
        """The runtimes offered, as records."""
        ...


@dataclass(frozen=True)
class Feature(Generic[T]):
    """One optional feature: its protocol, what it does (after "cannot") and the way out."""

    protocol: Any  # the runtime-checkable Protocol class T
    does: str
    fix: str

    def has(self, backend: object) -> bool:
        """Whether ``backend`` offers this feature."""
        return isinstance(backend, self.protocol)

    def of(self, backend: Backend) -> T:
        """``backend`` as this feature; :class:`MissingFeature` when it lacks it."""
        if not self.has(backend):
            raise MissingFeature(backend.name, self)
        return cast(T, backend)


ATTACH: Feature[Attaches] = Feature(
    Attaches,
    "follow a job this process did not start",
    "follow it from the kernel that submitted it, or read its output with %distrain_logs",
)
NAMESPACE: Feature[ListsNamespace] = Feature(
    ListsNamespace,
    "list jobs started by others",
    "its own jobs are listed without --all",
)
STACKS: Feature[RequestsStacks] = Feature(
    RequestsStacks,
    "ask a running job for its stacks",
    "its jobs send them when they hang (--hang-after SECONDS)",
)
CONTROLS: Feature[ControlsRanks] = Feature(
    ControlsRanks,
    "reach a running job's ranks (pause, breakpoints)",
    "put breakpoint() in the cell, or set breakpoints in its gutter before it runs",
)
SESSIONS: Feature[RunsSessions] = Feature(
    RunsSessions,
    "run live sessions",
    "run the cell as a job with %%distrain, or choose another --backend",
)
RANKS: Feature[ReachesRanks] = Feature(
    ReachesRanks,
    "reach a rank's debugger",
    "run the job on a backend that can (local, kubernetes)",
)
RUNTIMES: Feature[ListsRuntimes] = Feature(
    ListsRuntimes,
    "list training runtimes",
    "choose a backend that has them (kubernetes with Kubeflow Trainer)",
)

#: Every optional feature, for listings and checks.
FEATURES: tuple[Feature[Any], ...] = (
    ATTACH,
    NAMESPACE,
    STACKS,
    CONTROLS,
    SESSIONS,
    RANKS,
    RUNTIMES,
)


def offered(backend: Backend) -> tuple[Feature[Any], ...]:
    """The optional features ``backend`` offers."""
    return tuple(f for f in FEATURES if f.has(backend))
