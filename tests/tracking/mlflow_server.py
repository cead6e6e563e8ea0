"""A real MLflow tracking server on 127.0.0.1 for the tests (``mlflow_server`` fixture)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Seconds the server may take to create its database and answer /health.
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class MlflowServer:
    """A running server: its tracking URI, where it keeps artifacts, and its log file."""

    uri: str
    artifacts: Path
    log: Path

    def output(self) -> str:
        """What the server printed so far (for assertion messages)."""
        return self.log.read_text(errors="replace")[-4000:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running_server(base: Path) -> Iterator[MlflowServer]:
    """``mlflow server`` on 127.0.0.1 with a SQLite store under ``base``, serving artifacts.

    Stopped (with its workers) on exit.
    """
    port = free_port()
    server = MlflowServer(f"http://127.0.0.1:{port}", base / "artifacts", base / "server.log")
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{base / 'mlflow.db'}",
        "--artifacts-destination",
        str(server.artifacts),
        "--workers",
        "1",
    ]
    # The tracking API only: no job runner (mlflow 3's huey consumers, ~25 CPU-s a server).
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(server.log, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(server.uri):
            assert proc.poll() is None, f"mlflow server exited: {server.output()}"
            assert time.monotonic() < deadline, f"mlflow server not up: {server.output()}"
            time.sleep(0.3)
        yield server
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers (its own group)
        except ProcessLookupError:
            pass
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real tracking server for the tests of one module."""
    with running_server(tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server
