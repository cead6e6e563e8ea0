"""Shared fixtures: an isolated job home and process-table checks."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_disttrain.runtime import collector

#: Shared fixtures: ``s3`` (moto's S3 server on 127.0.0.1).
#: ``tests.schedule`` orders the parallel run: the longest test files first.
#: ``tests.cpu_usage`` records each test's CPU when asked (``make test TEST_CPU=FILE``).
pytest_plugins = [
    "tests.s3_server",
    "tests.k8s_emulator.fixtures",
    "tests.schedule",
    "tests.cpu_usage",
]

# Each test process's own job home, temporary directory and runtime folder: tests/isolation.py
# (loaded by every pytest run, pyproject's addopts).


@pytest.hookimpl(hookwrapper=True)
def pytest_collection() -> Iterator[None]:
    """Collect (import every test module, and torch, kubernetes and the like with them)
    without the garbage collector's passes; then freeze what it made, which lives until
    the process ends, so that no collection during the tests walks it again."""
    with collector.frozen():
        yield


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


@pytest.fixture
def home() -> Iterator[Path]:
    """The job home of this test process."""
    yield Path(os.environ["DISTRAIN_HOME"])


def submit_now(backend: Any, spec: Any, payload: Any, sink: Any) -> Any:
    """Plan ``spec`` on ``backend`` and submit that plan (the service's two steps)."""
    return backend.submit(backend.plan(spec, payload), sink)
