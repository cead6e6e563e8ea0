"""``disttrain mcp`` over stdio, driven by the SDK's client: real jobs, end to end, and a
TrainJob someone else created on the Kubernetes emulator."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO
from tests.k8s_emulator.emulator import Emulator

from .client import (
    FOREIGN,
    call,
    create_foreign,
    full_flow,
    reads_foreign,
    refuses_run_and_stop,
    trainjob_names,
)

pytestmark = pytest.mark.slow


def params(home: Path, *flags: str, kubeconfig: str = "/nonexistent") -> StdioServerParameters:
    env = {**os.environ, "DISTRAIN_HOME": str(home), "KUBECONFIG": kubeconfig}
    return StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        env=env,
        args=["-m", "jupyter_disttrain.cli", "mcp", *flags],
    )


def test_plan_run_follow_fail_logs_where_and_stop(home: Path) -> None:
    async def main() -> None:
        async with Client(params(home, "--allow-run", "--allow-stop")) as client:
            await full_flow(client)

    anyio.run(main)


def test_read_only_by_default_refuses_run_and_stop(home: Path) -> None:
    async def main() -> None:
        async with Client(params(home)) as client:
            await refuses_run_and_stop(client, "mcp-ro")
            error, listed = await call(client, "list_jobs")
            assert not error and "mcp-ro" not in listed, listed

    anyio.run(main)


def test_a_foreign_trainjob_is_listed_and_read_but_not_stopped_unasked(
    k8s_trainer_emulator: Emulator, tmp_path: Path, home: Path
) -> None:
    """A TrainJob created with the kubernetes client (not by this tool): listed with
    everyone=true as someone else's, its status, logs and diagnosis read; where, run and stop
    refused as designed (read-only: the flags; widened: RBAC, then a confirmation)."""
    emulator = k8s_trainer_emulator
    kubeconfig = str(emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    create_foreign(emulator)

    async def read_only() -> None:
        async with Client(params(home, kubeconfig=kubeconfig)) as client:
            await reads_foreign(client, emulator)
            await refuses_run_and_stop(client, FOREIGN)

    async def widened() -> None:
        flags = ("--allow-run", "--allow-stop")
        async with Client(params(home, *flags, kubeconfig=kubeconfig)) as client:
            emulator.deny(verbs=["delete"], resources=["trainjobs"])
            try:
                error, refused = await call(client, "stop_job", name=FOREIGN, confirm=True)
                assert error and "read-only here: your Kubernetes RBAC" in refused, refused
            finally:
                emulator.clear_faults()
            error, asked = await call(client, "stop_job", name=FOREIGN)
            assert error and "not by jupyter-disttrain" in asked, asked
            assert "needs confirm=true" in asked, asked
            error, refused = await call(
                client, "debug_send", name=FOREIGN, rank=0, line="p 1", confirm=True
            )
            assert error and "no job named" in refused, refused
            assert FOREIGN in trainjob_names(emulator)  # nothing deleted unasked
            error, stopped = await call(client, "stop_job", name=FOREIGN, confirm=True)
            assert not error and f"{FOREIGN}: stopped" in stopped, stopped
            assert FOREIGN not in trainjob_names(emulator)

    anyio.run(read_only)
    anyio.run(widened)
