"""One run flow for every door: a plan exported, previewed, or run and followed to its end.

The door (a cell magic, the ``disttrain run`` command) builds the spec and
the plan, then hands the plan and a :class:`RunView` to :func:`run_and_follow`
and shows the :class:`RunOutcome` its own way. The view is anything with the
three calls below (the dashboard and text views of ``progress.LiveView``);
this module knows no widget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from .. import events as ev
from ..backends.base import Plan
from ..job import Job


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
