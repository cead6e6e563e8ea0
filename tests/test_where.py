"""Where the ranks are: a job that hangs says which rank holds the others up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain.service import JobService
from tests.conftest import REPO, assert_no_processes
from tests.test_service import parse

pytestmark = pytest.mark.slow

#: Rank 2 skips the fourth all_reduce; the others wait for it in that collective.
HANG_CELL = """import time
import torch, torch.distributed as dist
rank = dist.get_rank()
t = torch.ones(1)
for step in range(3):
    dist.all_reduce(t)
    report(step=step, value=t.item())
if rank != 2:
    dist.all_reduce(t)
else:
    time.sleep(600)
"""


def test_a_rank_that_skips_a_collective_is_named_with_its_stacks(home: Path) -> None:
    service = JobService()
    spec = service.spec(
        parse("--nodes", "2", "--nproc", "2", "--name", "where-hang", "--hang-after", "5")
    )
    job = service.run(service.plan(spec, HANG_CELL))
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while [r.state for r in job.monitor.ranks()] != ["Running"] * 4:
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.2)
        pids = [r.pid for r in job.monitor.ranks() if r.pid]
        started = time.monotonic()
        sentence = job.diagnosis()
        while not (sentence and sentence.startswith("Hang")) and time.monotonic() - started < 30:
            time.sleep(0.2)
            sentence = job.diagnosis()
        took = time.monotonic() - started
        assert sentence and sentence.startswith("Hang"), (sentence, took, job.logs())
        assert "Rank 2 holds up the others" in sentence, sentence
        assert "ranks 0-1,3 wait in all_reduce (cell line 9)" in sentence, sentence
        assert "rank 2 is in time.sleep (cell line 11)" in sentence, sentence
        assert "never entered collective 4 (all_reduce)" in sentence, sentence

        where = job.where(timeout=20)
        assert where.reason == "asked" and not where.missing, where.text()
        assert [g.ranks for g in where.groups] == [(0, 1, 3), (2,)], where.text()
        text = where.text()
        assert 'File "<distrain-cell>", line 9, in <module>' in text, text
        assert 'File "<distrain-cell>", line 11, in <module>' in text, text
        assert "in all_reduce" in text, text

        env = {**os.environ, "DISTRAIN_HOME": str(home), "KUBECONFIG": "/nonexistent"}
        out = subprocess.run(
            [sys.executable, "-m", "jupyter_disttrain.cli", "where", "where-hang"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        assert "rank 2 is in time.sleep (cell line 11)" in out.stdout, out.stdout
    finally:
        job.stop()
    assert job.status() == "Stopped"
    assert_no_processes(home / "jobs" / "where-hang", pids)


def test_hang_after_zero_turns_detection_off_and_bad_values_are_refused() -> None:
    from jupyter_disttrain.spec import SpecError

    service = JobService()
    spec = service.spec(parse("--name", "where-off", "--hang-after", "0"))
    assert spec.hang_after == 0
    with pytest.raises(SpecError, match=r"--hang-after must be 0 \(never\) or at least 1 second"):
        service.spec(parse("--name", "where-bad", "--hang-after", "0.5"))


#: Rank 1 calls barrier() where rank 0 calls all_reduce(): both at their third collective.
MIXED_CELL = """import time
import torch, torch.distributed as dist
t = torch.ones(1)
for step in range(2):
    dist.all_reduce(t)
    report(step=step, value=t.item())
if dist.get_rank() == 0:
    dist.all_reduce(t)
else:
    dist.barrier()
"""


def test_ranks_that_call_different_collectives_are_named(home: Path) -> None:
    service = JobService()
    spec = service.spec(
        parse("--nproc", "2", "--name", "where-mixed", "--hang-after", "3", "--timeout", "120")
    )
    job = service.run(service.plan(spec, MIXED_CELL))
    try:
        deadline = time.monotonic() + 90
        sentence = job.diagnosis()
        while not (sentence and sentence.startswith("Hang")) and time.monotonic() < deadline:
            time.sleep(0.2)
            sentence = job.diagnosis()
        assert sentence and sentence.startswith("Hang"), (sentence, job.logs())
        assert "rank 1 waits in barrier (cell line 10)" in sentence, sentence
        assert "Rank 0 waits in all_reduce (cell line 8)" in sentence, sentence
        assert (
            "as their collective 3 the ranks called different operations "
            "(all_reduce on rank 0, barrier on rank 1)"
        ) in sentence, sentence
    finally:
        job.stop()
    assert job.status() == "Stopped"
