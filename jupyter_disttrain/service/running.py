"""One run flow for every door: a plan exported, previewed, or run and followed to its end.

The door (a cell magic, the ``disttrain run`` command) builds the spec and
the plan, then hands the plan and a :class:`RunView` to :func:`run_and_follow`
and shows the :class:`RunOutcome` its own way; a session cell goes to
:func:`run_cell_and_follow` with the same kind of view. The view is anything
with the three calls below (the dashboard and text views of
``textview.LiveView``); this module knows no widget.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .. import events as ev
from ..backends.base import Backend, Plan
from ..job import Job
from ..sessions import Session
from ..spec import SpecError


class RunView(Protocol):
    """What shows a job while it runs; the flow calls it in this order."""

    def on_event(self, event: ev.Event) -> None:
        """An event of the job (from a backend thread; must be cheap)."""

    def attach(self, job: Job) -> None:
        """Start showing ``job`` (right after it was submitted)."""

    def close(self) -> None:
        """Show the final state once more and stop refreshing."""


class Runner(Protocol):
    """The two service calls the flow makes (:class:`~jupyter_disttrain.service.JobService`'s)."""

    def export(self, plan: Plan, path: str) -> str:
        """Write the plan's manifests to ``path``; returns what to run next."""

    def run(self, plan: Plan, listeners: Iterable[Callable[[ev.Event], None]] = ()) -> Job:
        """Submit ``plan`` with ``listeners`` attached."""


@dataclass
class RunOutcome:
    """What :func:`run_and_follow` did.

    ``what``: ``exported`` (manifests written; ``hint`` says how to submit
    them), ``planned`` (a dry run: nothing ran, show the plan), ``running``
    (submitted, not waited for), ``ended`` (waited until the job ended) or
    ``interrupted`` (Ctrl-C while waiting: the job was stopped).
    """

    what: Literal["exported", "planned", "running", "ended", "interrupted"]
    plan: Plan
    job: Job | None = None
    hint: str = ""


def run_and_follow(
    service: Runner,
    plan: Plan,
    view: RunView,
    *,
    export_to: str | None = None,
    dry_run: bool = False,
    wait: bool = True,
    on_start: Callable[[Job], None] | None = None,
) -> RunOutcome:
    """Export ``plan`` to ``export_to``, or stop at a dry run, or run it with ``view`` following.

    ``on_start`` is called with the job once submitted, before the view
    shows it. With ``wait`` the call blocks until the job ends; Ctrl-C from
    submission on stops the job and closes the view (outcome ``interrupted``:
    the door says so and ends as it ends on Ctrl-C). Errors of the service's ``export`` and
    ``run`` (:class:`~jupyter_disttrain.spec.SpecError`,
    :class:`~jupyter_disttrain.backends.base.BackendError`) propagate.
    """
    if export_to:
        return RunOutcome("exported", plan, hint=service.export(plan, export_to))
    if dry_run:
        return RunOutcome("planned", plan)
    job = service.run(plan, [view.on_event])
    try:  # Ctrl-C at any point from here on stops the job
        if on_start is not None:
            on_start(job)
        view.attach(job)
        if not wait:
            return RunOutcome("running", plan, job)
        job.wait()
    except KeyboardInterrupt:
        job.stop()
        view.close()
        return RunOutcome("interrupted", plan, job)
    view.close()
    return RunOutcome("ended", plan, job)


def run_cell_and_follow(
    session: Session,
    source: str,
    view: RunView,
    namespace: Mapping[str, Any] | None = None,
    *,
    max_capture_bytes: int | None = None,
    breakpoints: list[dict[str, Any]] | None = None,
) -> Any:
    """Run the cell ``source`` on every rank of ``session`` with ``view`` following it.

    The cell's :class:`Job` gets ``view.on_event`` as a listener and is
    attached to ``view`` before the cell is sent; the view is closed however
    the cell ends. Returns rank 0's value of the cell and raises what
    :meth:`~jupyter_disttrain.sessions.Session.run` raises. Ctrl-C is the
    session's: the cell is interrupted on every rank and the ranks keep their
    state (``KeyboardInterrupt``), or the group is restarted when a rank does
    not come back (:class:`~jupyter_disttrain.sessions.SessionLost`).
    """

    def follow(job: Job) -> None:
        job.add_listener(view.on_event)
        view.attach(job)

    try:
        return session.run(
            source,
            namespace,
            max_capture_bytes=max_capture_bytes,
            on_cell=follow,
            breakpoints=breakpoints,
        )
    finally:
        view.close()


def export_plan(backend: Backend, plan: Plan, path: str) -> str:
    """Write ``plan``'s manifests to ``path`` (the owner's only: they hold the job key);
    returns the command that submits them. :class:`SpecError` when ``backend`` has none
    or the file cannot be written."""
    text = plan.export()
    if text is None or not backend.capabilities.exports_plans:
        raise SpecError(
            f"--export writes manifests to apply elsewhere; the {backend.name} backend has "
            "none: use --dry-run to see its plan"
        )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError as exc:
        raise SpecError(f"--export: cannot write {path}: {exc.strerror}") from None
    return f"kubectl create -f {path}"
