"""``disttrain mcp`` over stdio, driven by the SDK's client: real jobs, end to end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO

from .client import call, full_flow

pytestmark = pytest.mark.slow


def params(home: Path, *flags: str) -> StdioServerParameters:
    env = {**os.environ, "DISTRAIN_HOME": str(home), "KUBECONFIG": "/nonexistent"}
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
            error, plan = await call(
                client, "plan_cell", source="x = 1", options="--nodes 1 --nproc 2 --name mcp-ro"
            )
            assert not error, plan
            token = plan.split("plan_token: ")[1].split()[0]
            error, refused = await call(client, "run_job", plan_token=token)
            assert error and "read-only" in refused and "--allow-run" in refused, refused
            error, refused = await call(client, "stop_job", name="mcp-ro", confirm=True)
            assert error and "read-only" in refused and "--allow-stop" in refused, refused
            error, refused = await call(
                client, "debug_send", name="mcp-ro", rank=0, line="p 1", confirm=True
            )
            assert error and "--allow-run" in refused, refused
            error, listed = await call(client, "list_jobs")
            assert "mcp-ro" not in listed, listed

    anyio.run(main)
