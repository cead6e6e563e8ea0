"""``disttrain mcp`` over stdio, driven by the SDK's client: real jobs, end to end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO

from .client import FAIL_CELL, HANG_CELL, call, plan_run, wait_for

pytestmark = pytest.mark.slow


def params(home: Path, *flags: str) -> StdioServerParameters:
    env = {**os.environ, "DISTRAIN_HOME": str(home), "KUBECONFIG": "/nonexistent"}
    return StdioServerParameters(command=sys.executable, cwd=str(REPO), env=env,
                                 args=["-m", "jupyter_disttrain.cli", "mcp", *flags])


def test_plan_run_follow_fail_logs_where_and_stop(home: Path) -> None:
    async def main() -> None:
        async with Client(params(home, "--allow-run", "--allow-stop")) as client:
            await plan_run(client, "mcp-fail", FAIL_CELL)
            await plan_run(client, "mcp-hang", HANG_CELL)
            status = await wait_for(client, "mcp-fail", ("Failed",))
            error, logs = await call(client, "job_logs", name="mcp-fail", rank=1, tail=5)
            assert "failing ranks: 1" in status and "bad batch on rank one" in status, (status, logs)
            assert not error and "rank 1 reduced 2.0" in logs, logs
            assert len(logs.splitlines()) <= 6, logs
            error, grep = await call(client, "job_logs", name="mcp-fail", grep="reduced")
            assert not error and "rank 0 reduced" in grep and "rank 1 reduced" in grep, grep

            await wait_for(client, "mcp-hang", ("Running",))
            error, logs = await call(client, "job_logs", name="mcp-hang", tail=20)
            while "both ranks up" not in logs:
                await anyio.sleep(0.5)
                error, logs = await call(client, "job_logs", name="mcp-hang", tail=20)
            error, where = await call(client, "job_where", name="mcp-hang", timeout=60)
            assert not error and "time.sleep" in where and "all_reduce" in where, where
            error, refused = await call(client, "stop_job", name="mcp-hang")
            assert error and "needs confirm=true" in refused, refused
            error, stopped = await call(client, "stop_job", name="mcp-hang", confirm=True)
            assert not error and "mcp-hang: Stopped" in stopped, stopped
            error, listed = await call(client, "list_jobs")
            assert "mcp-hang\tStopped" in listed and "mcp-fail\tFailed" in listed, listed

    anyio.run(main)


def test_read_only_by_default_refuses_run_and_stop(home: Path) -> None:
    async def main() -> None:
        async with Client(params(home)) as client:
            error, plan = await call(client, "plan_cell", source="x = 1",
                                     options="--nodes 1 --nproc 2 --name mcp-ro")
            assert not error, plan
            token = plan.split("plan_token: ")[1].split()[0]
            error, refused = await call(client, "run_job", plan_token=token)
            assert error and "read-only" in refused and "--allow-run" in refused, refused
            error, refused = await call(client, "stop_job", name="mcp-ro", confirm=True)
            assert error and "read-only" in refused and "--allow-stop" in refused, refused
            error, refused = await call(client, "debug_send", name="mcp-ro", rank=0, line="p 1",
                                        confirm=True)
            assert error and "--allow-run" in refused, refused
            error, listed = await call(client, "list_jobs")
            assert "mcp-ro" not in listed, listed

    anyio.run(main)
