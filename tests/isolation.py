"""Every test process's own job home, temporary directory and runtime folder.

Loaded by every pytest run (``-p tests.isolation`` in pyproject's ``addopts``), so a run of
the notebooks alone (``pytest notebooks/01-quickstart.ipynb``), whose kernels read no
``tests/conftest.py``, keeps its jobs and its launcher out of the user's own home too.

Each test process (each pytest-xdist worker too) keeps its local jobs in a private
directory, and its jobs' scratch files in a private temporary directory: tests that look at
what a job left in the temporary directory see only their own process's jobs. A
pytest-xdist worker inherits the controller's environment: it makes its own home. This
process, its kernels and its `disttrain run`s share one lingering launcher, as one user's
processes do, instead of each importing torch into a launcher of its own (3.5 s of CPU
each); it lives in this process's own runtime folder. All of it ends with the process
(:func:`pytest_unconfigure`); tests of lingering itself choose their own folders. Its local
jobs listen on ports of their own (``DISTRAIN_PORTS``, :mod:`tests.ports`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local.lingering import ENV_LINGER, stop_lingering
from jupyter_disttrain.backends.local.plan import ENV_PORTS
from tests.ports import job_ports_setting

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_MADE: list[str] = []
if _WORKER or "DISTRAIN_HOME" not in os.environ:
    os.environ["DISTRAIN_HOME"] = tempfile.mkdtemp(prefix=f"distrain-test-home-{_WORKER or ''}")
    _MADE.append(os.environ["DISTRAIN_HOME"])
os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="dt-tmp-")
_MADE.append(os.environ["TMPDIR"])
tempfile.tempdir = None  # gettempdir() reads TMPDIR again
os.environ["JUPYTER_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="rt-")  # in TMPDIR, removed with it
os.environ[ENV_LINGER] = "60"
os.environ[ENV_PORTS] = job_ports_setting()  # apart from the emulators' and other workers'


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the lingering launchers of this process's runtime folder; remove the job home and
    temporary directory (the runtime folder with it) it made for itself."""
    stop_lingering(Path(os.environ["JUPYTER_RUNTIME_DIR"]) / "distrain")
    for directory in _MADE:
        shutil.rmtree(directory, ignore_errors=True)
