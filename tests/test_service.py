"""The job service: the plan shown is the plan run; one diagnosis for every front door."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import LocalPlan
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.server.manager import JobManager
from jupyter_disttrain.service import JobService
from tests.conftest import REPO, assert_no_processes

#: Lines a real NCCL prints when a peer refuses the bootstrap connection, then a quiet wait.
NCCL_CELL = """
import time, torch.distributed as dist
if dist.get_rank() == 1:
    print("node1:2201:2230 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>", flush=True)
    print("node1:2201:2230 [1] misc/socket.cc:484 NCCL WARN Net : Connect to 10.0.0.3<43211> "
          "failed : Connection refused", flush=True)
report(step=0, up=1)
time.sleep(120)
"""


def parse(*argv: str) -> Namespace:
    import argparse

    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(list(argv))


def test_dry_run_plan_is_the_plan_submitted(home: Path) -> None:
    service = JobService()
    spec = service.spec(parse("--nodes", "2", "--nproc", "1", "--name", "svc-plan"))
    plan = service.plan(spec, "import torch.distributed as dist\ndist.get_rank()")
    shown = str(plan)
    assert isinstance(plan, LocalPlan)
    job = service.run(plan)
    try:
        assert job.wait(240) == "Succeeded", job.logs()
        assert job.plan is plan and job.submission is not None
        assert job.submission.plan is plan  # type: ignore[attr-defined]
        assert str(job.submission.plan) == shown  # type: ignore[attr-defined]
        agent_log = (home / "jobs" / "svc-plan" / "logs" / "agent-0.log").read_text()
        state = json.loads((home / "jobs" / "svc-plan" / "state.json").read_text())
        assert plan.rdzv_endpoint in shown, shown
        assert state.get("nodes") == 2, (state, agent_log)
        assert plan.nodes[0].env["DISTRAIN_RUN_ID"] in shown, shown
        assert f"launch: {plan.mode} " in shown, shown
        assert job.result() == 0
    finally:
        job.stop()
    assert_no_processes(home / "jobs" / "svc-plan")


@pytest.mark.slow
def test_nccl_diagnosis_in_cli_and_sidebar_without_dashboard(home: Path) -> None:
    service = JobService()
    spec = service.spec(parse("--nodes", "1", "--nproc", "2", "--name", "svc-nccl"))
    job = service.run(service.plan(spec, NCCL_CELL))
    try:
        deadline = time.monotonic() + 120
        while job.diagnosis() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        sentence = job.diagnosis()
        assert sentence and "refused" in sentence.lower(), (sentence, job.logs())
        env = {**os.environ, "DISTRAIN_HOME": str(home), "KUBECONFIG": "/nonexistent"}
        # Another process reads the job's record, which its follower (this process) rewrites
        # every second: the sentence shows there within about a second of showing here.
        shown = time.monotonic() + 30
        listings: list[str] = []
        while not listings or f"svc-nccl: {sentence}" not in listings[-1]:
            assert time.monotonic() < shown, (listings, job.logs())
            out = subprocess.run(
                [sys.executable, "-m", "jupyter_disttrain.cli", "jobs"],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
                cwd=REPO,
            )
            assert out.returncode == 0, out.stderr
            listings.append(out.stdout)
        manager = JobManager(lambda: [service.backend("local")])
        try:
            found: str | None = None
            while found is None and time.monotonic() < deadline:
                rows = [j for j in manager.list_jobs()["jobs"] if j["name"] == "svc-nccl"]
                found = rows[0]["diagnosis"] if rows else None
                time.sleep(0.2)
            assert found == sentence, (found, sentence)
        finally:
            manager.close()
    finally:
        job.stop()
    assert_no_processes(home / "jobs" / "svc-nccl")
