"""The doors' one run flow: export, dry run, run and follow, Ctrl-C, each on a real local job;
session cells followed the same way on a real local session."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import jobdir
from jupyter_disttrain.job import Job
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService
from jupyter_disttrain.sessions import Session
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.conftest import assert_no_processes


class Recorder:
    """A view (the :class:`~jupyter_disttrain.service.RunView` calls) that writes down its calls."""

    def __init__(self, interrupt_on_attach: bool = False) -> None:
        self.calls: list[str] = []
        self.events: list[ev.Event] = []
        self.jobs: list[Job] = []
        self.interrupt_on_attach = interrupt_on_attach

    def on_event(self, event: ev.Event) -> None:
        self.events.append(event)

    def attach(self, job: Job) -> None:
        self.calls.append(f"attach {job.name}")
        self.jobs.append(job)
        if self.interrupt_on_attach:
            raise KeyboardInterrupt  # Ctrl-C while the view comes up

    def close(self) -> None:
        self.calls.append("close")


def plan_of(service: JobService, name: str, cell: str, *argv: str):  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    spec = service.spec(parser.parse_args(["--name", name, *argv]))
    return service.plan(spec, cell)


def test_a_waited_run_is_followed_to_its_end(home: Path) -> None:
    service = JobService()
    plan = plan_of(service, "flow-wait", "6 * 7")
    view = Recorder()
    started: list[str] = []
    outcome = service.run_and_follow(
        plan, view, on_start=lambda job: started.append(f"start {job.name} {len(view.calls)}")
    )
    assert outcome.what == "ended" and outcome.job is not None and outcome.plan is plan
    assert outcome.job.done and outcome.job.result() == 42
    assert started == ["start flow-wait 0"]  # before the view showed the job
    assert view.calls == ["attach flow-wait", "close"]
    assert any(e.kind == "job" and e.get("state") == "Succeeded" for e in view.events)
    assert service.registered()["flow-wait"] is outcome.job


def test_without_wait_the_job_runs_on(home: Path) -> None:
    service = JobService()
    outcome = service.run_and_follow(
        plan_of(service, "flow-bg", "import time\ntime.sleep(1)\n1"), Recorder(), wait=False
    )
    assert outcome.what == "running" and outcome.job is not None
    assert outcome.job.wait(120) == "Succeeded"


def test_ctrl_c_stops_the_job_and_closes_the_view(home: Path) -> None:
    service = JobService()
    view = Recorder(interrupt_on_attach=True)
    plan = plan_of(service, "flow-int", "import time\ntime.sleep(300)", "--nproc", "2")
    outcome = service.run_and_follow(plan, view)
    assert outcome.what == "interrupted" and outcome.job is not None
    assert view.calls == ["attach flow-int", "close"]
    assert outcome.job.wait(60) == "Stopped"
    assert_no_processes(home / "jobs" / "flow-int")


def test_a_dry_run_runs_nothing_and_export_needs_manifests(home: Path, tmp_path: Path) -> None:
    service = JobService()
    view = Recorder()
    plan = plan_of(service, "flow-dry", "1")
    assert service.run_and_follow(plan, view, dry_run=True).what == "planned"
    with pytest.raises(SpecError, match="--export writes manifests"):
        service.run_and_follow(plan, view, export=str(tmp_path / "out.yaml"))
    assert view.calls == [] and "flow-dry" not in service.registered()
    assert not (home / "jobs" / "flow-dry").exists()


SESSION = "flow-sess"


@pytest.fixture(scope="module")
def group() -> Iterator[tuple[JobService, Session]]:
    """One live 1x2 session and its service; stopping it leaves no process."""
    service = JobService()
    session = service.start_session(JobSpec(SESSION, nodes=1, nproc=2))
    yield service, session
    assert service.stop_session(SESSION) in ("Succeeded", "Stopped")
    assert_no_processes(jobdir.job_dir(SESSION))


def metric_ranks(view: Recorder) -> set[int | None]:
    return {e.rank for e in view.events if e.kind == "metric"}


@pytest.mark.slow
def test_a_session_cell_is_followed_by_the_view(group: tuple[JobService, Session]) -> None:
    service, session = group
    view = Recorder()
    cell = "import torch.distributed as dist\nreport(step=0, rank=float(dist.get_rank()))\nSIX * 7"
    assert service.run_cell_and_follow(session, cell, view, {"SIX": 6}) == 42
    assert view.calls == [f"attach {SESSION}", "close"]
    (cell_job,) = view.jobs  # the cell's own job, not the group's
    assert cell_job is not session.job and cell_job.status() == "Succeeded"
    assert metric_ranks(view) == {0, 1}  # the view heard the cell's events from every rank
    assert any(e.kind == "job" and e.get("state") == "Succeeded" for e in view.events)
    assert session.status() == "idle"


@pytest.mark.slow
def test_a_failing_session_cell_raises_and_its_view_shows_the_rank(
    group: tuple[JobService, Session],
) -> None:
    service, session = group
    view = Recorder()
    cell = "import torch.distributed as dist\nif dist.get_rank() == 1:\n    raise ValueError('bad')"
    with pytest.raises(ValueError, match="bad"):
        service.run_cell_and_follow(session, cell, view)
    assert view.calls == [f"attach {SESSION}", "close"]
    (cell_job,) = view.jobs
    assert cell_job.status() == "Failed" and cell_job.monitor.reason == "rank 1: ValueError: bad"
    assert any(e.kind == "error" and e.rank == 1 for e in view.events)
    assert service.run_cell_and_follow(session, "1 + 1", Recorder()) == 2  # still usable


@pytest.mark.slow
def test_an_interrupted_session_cell_closes_its_view_and_the_ranks_keep_their_state(
    group: tuple[JobService, Session],
) -> None:
    """An interrupt (what Ctrl-C in the kernel asks for; a real one is in
    ``tests/test_sessions_kernel.py``) ends the cell on every rank, its job Stopped, its view
    closed, and the ranks keep their state."""
    service, session = group
    service.run_cell_and_follow(session, "kept = 'still here'", Recorder())
    view = Recorder()
    cell = "import time\nfor _ in range(600):\n    time.sleep(0.1)"
    timer = threading.Timer(1.5, session.interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt, match="interrupted on every rank"):
            service.run_cell_and_follow(session, cell, view)
    finally:
        timer.cancel()
    assert view.calls == [f"attach {SESSION}", "close"]
    assert view.jobs[0].status() == "Stopped"
    assert session.restarts == 0
    assert service.run_cell_and_follow(session, "kept", Recorder()) == "still here"


@pytest.mark.slow
def test_ctrl_c_while_the_view_comes_up_sends_no_cell(group: tuple[JobService, Session]) -> None:
    service, session = group
    view = Recorder(interrupt_on_attach=True)
    with pytest.raises(KeyboardInterrupt):
        service.run_cell_and_follow(session, "ran = True", view)
    assert view.calls == [f"attach {SESSION}", "close"]
    assert session.status() == "idle"
    assert service.run_cell_and_follow(session, "'ran' in globals()", Recorder()) is False
