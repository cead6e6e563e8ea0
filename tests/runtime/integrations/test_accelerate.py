"""Accelerate under autolog (real 1x2 jobs), the cell's own report() winning, and a library
version the integration does not know (a job that imports an ``accelerate`` 0.1)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from tests.backends.kubernetes.test_backend_trainjob import trainer  # noqa: F401 (a fixture)
from tests.optional import requires
from tests.runtime.integrations.jobs import run_cell, values

pytestmark = requires("accelerate")

ACCELERATE_CELL = textwrap.dedent(
    """
    import torch
    from accelerate import Accelerator
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    for step in range(6):
        x = torch.randn(8, 4)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); acc.backward(loss); opt.step()
        acc.log({"loss": loss.item(), "note": "text is left out"}, step=step)
    report(step=100, own=1.0)  # from now on the cell's own values only
    acc.log({"late": 2.0}, step=101)
    acc.process_index
    """
)

OLD_LIBRARY = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, FAKE)
    import accelerate
    acc = accelerate.Accelerator()
    for step in range(3):
        acc.log({"loss": 1.0}, step=step)
    accelerate.__version__
    """
)


@pytest.mark.slow
def test_accelerator_log_reaches_every_rank_and_report_wins(home: Path) -> None:
    service = JobService()
    argv = ["--nodes", "1", "--nproc", "2", "--name", "acc-autolog", "--timeout", "200"]
    job = run_cell(service, argv, ACCELERATE_CELL, {})
    try:
        assert job.wait(200) == "Succeeded", job.logs()
    finally:
        job.stop()
    for rank in (0, 1):
        assert sorted(values(job, rank, "loss")) == list(range(6)), (rank, job.logs())
        assert values(job, rank, "own") == {100: 1.0}
    assert "late" not in job.metrics().columns and "note" not in job.metrics().columns


@pytest.mark.slow
def test_an_unknown_library_version_warns_once_and_the_job_succeeds(
    home: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "site" / "accelerate"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        '__version__ = "0.1.0"\n\n'
        "class Accelerator:\n"
        "    def log(self, values, step=None):\n"
        "        return None\n"
    )
    service = JobService()
    argv = ["--nodes", "1", "--nproc", "2", "--name", "acc-unknown", "--timeout", "200"]
    job = run_cell(service, argv, OLD_LIBRARY, {"FAKE": str(fake.parent)})
    try:
        assert job.wait(200) == "Succeeded", job.logs()
    finally:
        job.stop()
    assert job.result() == "0.1.0"
    assert list(job.metrics()) == []
    logs = job.logs()
    warning = "autolog: accelerate 0.1.0 is not a version the accelerate integration knows"
    assert logs.count(warning) == 2, logs  # once on each of the two ranks
    assert "the job runs without it" in logs


@pytest.mark.slow
@pytest.mark.usefixtures("trainer")
def test_a_trainjob_on_the_emulator_sends_every_ranks_values_through_the_relay() -> None:
    """The Accelerate loop as a 2x2 TrainJob: every rank's accelerator.log values."""
    backend = KubernetesBackend()
    payload = build_payload(ACCELERATE_CELL, {}, job="tj-accelerate")
    spec = JobSpec("tj-accelerate", backend="kubernetes", nodes=2, nproc=2, timeout=240)
    plan = backend.plan(spec, payload)
    assert plan.objects[1]["kind"] == "TrainJob"
    job = jobs.default_service().run(plan)
    assert job.result(timeout=240) == 0, job.logs()
    for rank in range(4):
        assert sorted(values(job, rank, "loss")) == list(range(6)), (rank, job.logs())
        assert values(job, rank, "own") == {100: 1.0}, (rank, job.logs())
    assert "late" not in job.metrics().columns and "note" not in job.metrics().columns
    assert backend.stop("tj-accelerate")
