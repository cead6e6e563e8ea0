"""A Lightning job's library is imported once, by a warm child of the launcher, for all its
processes; a job that does not ask for it does not find it imported, and a job whose
sys.path holds another copy of it gets its own."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local.launcher import ping, shared_launcher
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import job_logs, run_job
from tests.optional import requires

pytestmark = requires("lightning")

CELL = (
    "import sys\n"
    "ahead = 'lightning.pytorch' in sys.modules  # before the cell's own import\n"
    "import lightning.pytorch\n"
    "import lightning\n"
    "report(step=0, ahead=float(ahead), fake=float(getattr(lightning, 'FAKE', 0)))\n"
)


def values(sink: object) -> list[dict[str, float]]:
    return [dict(e.get("values")) for e in sink.kinds("metric")]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_the_launcher_imports_lightning_ahead_and_forks_no_job_that_imports_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink, run = run_job(JobSpec("warm-pl", nodes=1, nproc=2, timeout=120), CELL, timeout=150)
    assert sink.final().get("state") == "Succeeded", job_logs(run)
    assert values(sink) == [{"ahead": 1.0, "fake": 0.0}] * 2, job_logs(run)
    launcher = shared_launcher()
    assert "lightning" not in ping(launcher.socket_path)["modules"]  # its warm child has it

    # a job that does not import lightning does not find it imported
    plain = "import sys\nreport(step=0, ahead=float('lightning' in sys.modules), fake=0.0)\n"
    sink, run = run_job(JobSpec("warm-not", nodes=1, nproc=2, timeout=120), plain, timeout=150)
    assert sink.final().get("state") == "Succeeded", job_logs(run)
    assert values(sink) == [{"ahead": 0.0, "fake": 0.0}] * 2, job_logs(run)

    # a folder first on this process's sys.path holds another lightning: the job's
    # processes import that one, not the launcher's. This process has imported the
    # installed lightning, as a notebook that used it has, so the cell's lightning is that
    # package (asked ahead), not a module of the user's that travels with the payload.
    importlib.import_module("lightning")
    fake = tmp_path / "elsewhere" / "lightning"
    (fake / "pytorch").mkdir(parents=True)
    (fake / "__init__.py").write_text("FAKE = 1\n")
    (fake / "pytorch" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(fake.parent))
    sink, run = run_job(JobSpec("warm-fake", nodes=1, nproc=2, timeout=120), CELL, timeout=150)
    assert sink.final().get("state") == "Succeeded", job_logs(run)
    assert values(sink) == [{"ahead": 0.0, "fake": 1.0}] * 2, job_logs(run)
    hellos = sink.kinds("hello")
    assert all(e.get("pid") == e.get("launched_pid") for e in hellos), [e.fields for e in hellos]
