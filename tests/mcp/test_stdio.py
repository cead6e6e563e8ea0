"""``disttrain mcp`` over stdio, driven by the SDK's client: real jobs, end to end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO

from .client import call, full_flow, refuses_run_and_stop

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
            await refuses_run_and_stop(client, "mcp-ro")
            error, listed = await call(client, "list_jobs")
            assert not error and "mcp-ro" not in listed, listed

    anyio.run(main)
