"""The doors' one run flow: export, dry run, run and follow, Ctrl-C, each on a real local job."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.job import Job
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import SpecError
from tests.conftest import assert_no_processes


class Recorder:
    """A view (the :class:`~jupyter_disttrain.service.RunView` calls) that writes down its calls."""

    def __init__(self, interrupt_on_attach: bool = False) -> None:
        self.calls: list[str] = []
        self.events: list[ev.Event] = []
        self.interrupt_on_attach = interrupt_on_attach

    def on_event(self, event: ev.Event) -> None:
        self.events.append(event)

    def attach(self, job: Job) -> None:
        self.calls.append(f"attach {job.name}")
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
