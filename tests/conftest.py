"""Shared fixtures: an isolated job home and process-table checks."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_disttrain.backends.local.lingering import ENV_LINGER, stop_lingering

#: Shared fixtures: ``s3`` (moto's S3 server on 127.0.0.1).
#: ``tests.schedule`` orders the parallel run: the longest test files first.
pytest_plugins = ["tests.s3_server", "tests.k8s_emulator.fixtures", "tests.schedule"]

# Every test process (each pytest-xdist worker too) keeps its local jobs in a private
# directory, and its jobs' scratch files in a private temporary directory: tests that look
# at what a job left in the temporary directory see only their own process's jobs.
# A pytest-xdist worker inherits the controller's environment: it makes its own home.
# Both are this process's own and are removed when it ends (:func:`pytest_unconfigure`).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_MADE: list[str] = []
if _WORKER or "DISTRAIN_HOME" not in os.environ:
    os.environ["DISTRAIN_HOME"] = tempfile.mkdtemp(prefix=f"distrain-test-home-{_WORKER or ''}")
    _MADE.append(os.environ["DISTRAIN_HOME"])
os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="dt-tmp-")
_MADE.append(os.environ["TMPDIR"])
tempfile.tempdir = None  # gettempdir() reads TMPDIR again
# This test process, its kernels and its `disttrain run`s share one lingering launcher, as
# one user's processes do, instead of each importing torch into a launcher of its own
# (3.5 s of CPU each). It lives in this process's own runtime folder and ends with it
# (:func:`pytest_unconfigure`); tests of lingering itself choose their own folders.
os.environ["JUPYTER_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="rt-")
os.environ[ENV_LINGER] = "60"

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def live_job_processes(job_dir: Path, pids: Sequence[int] = ()) -> list[str]:
    """Processes of a job still alive: its group, its payload users and ``pids``."""
    import json

    state = json.loads((job_dir / "state.json").read_text())
    pgid = state.get("pgid")
    payload = str(job_dir / "payload.pkl")
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(proc.info["cmdline"] or [])
            if (pgid and _pgid(proc.pid) == pgid) or payload in cmd or proc.pid in pids:
                found.append(f"{proc.pid}: {cmd[:120]}")
        except psutil.Error:
            continue
    return found


def assert_no_processes(job_dir: Path, pids: Sequence[int] = (), wait: float = 5.0) -> None:
    """Fail unless every process of the job is gone (within ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    left = live_job_processes(job_dir, list(pids))
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = live_job_processes(job_dir, list(pids))
    assert not left, f"processes left behind: {left}"


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the lingering launchers of this test process's runtime folder; remove the job
    home and temporary directory it made for itself."""
    stop_lingering(Path(os.environ["JUPYTER_RUNTIME_DIR"]) / "distrain")
    for directory in _MADE:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def home() -> Iterator[Path]:
    """The job home of this test process."""
    yield Path(os.environ["DISTRAIN_HOME"])


def submit_now(backend: Any, spec: Any, payload: Any, sink: Any) -> Any:
    """Plan ``spec`` on ``backend`` and submit that plan (the service's two steps)."""
    return backend.submit(backend.plan(spec, payload), sink)
