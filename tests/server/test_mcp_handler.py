"""``/disttrain/mcp`` in a real Jupyter server, driven by the SDK's streamable HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_disttrain.backends.local import jobdir
from tests.k8s_emulator.emulator import Emulator
from tests.mcp.client import (
    FOREIGN,
    call,
    create_foreign,
    full_flow,
    reads_foreign,
    refuses_run_and_stop,
)

from .jobdirs import write_job

Url = Callable[[], str]


@pytest.fixture
def jp_server_config(job_home: Path, request: pytest.FixtureRequest) -> dict[str, object]:
    """The server extension; tests marked ``widened`` allow run and stop."""
    widened = request.node.get_closest_marker("widened") is not None
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_disttrain.server": True}},
        "DisttrainMCP": {"allow_run": widened, "allow_stop": widened},
    }


@pytest.fixture
def mcp_url(jp_fetch: Any, jp_http_port: int, jp_base_url: str) -> str:
    """The endpoint of the test server (listening: ``jp_fetch`` starts its HTTP server)."""
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}disttrain/mcp"


@asynccontextmanager
async def connected(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"token {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


async def test_no_token_is_403_and_a_token_lists_the_tools(jp_serverapp: Any, mcp_url: str) -> None:
    url = mcp_url
    body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    with pytest.raises(HTTPClientError) as denied:
        await AsyncHTTPClient().fetch(
            url, method="POST", body=body, headers={"Content-Type": "application/json"}
        )
    assert denied.value.code == 403, denied.value.response
    async with connected(mcp_url, jp_serverapp.identity_provider.token) as client:
        tools = await client.list_tools()
        assert "run_job" in [t.name for t in tools.tools]


async def test_read_only_refuses_and_a_100_mb_log_comes_back_bounded(
    jp_serverapp: Any, job_home: Path, mcp_url: str
) -> None:
    directory = write_job("mcp-big", nodes=1, nproc=2)
    rank0 = sorted(jobdir.logs_dir(directory).iterdir())[0]
    with rank0.open("a") as fh:
        chunk = ("x" * 99 + "\n") * 10_000
        for _ in range(100):
            fh.write(chunk)
    assert rank0.stat().st_size > 100_000_000
    async with connected(mcp_url, jp_serverapp.identity_provider.token) as client:
        await refuses_run_and_stop(client, "mcp-big")
        error, logs = await call(client, "job_logs", name="mcp-big", rank=0, tail=100_000)
        assert not error, logs[:500]
        assert len(logs.encode()) <= 70_000 and len(logs.splitlines()) <= 402, len(logs)
        assert "[cut:" in logs or "at most the last" in logs, logs[:300]
        error, missing = await call(client, "job_status", name="no-such-job")
        assert error and "no-such-job" in missing and "Traceback" not in missing, missing


@pytest.mark.widened
@pytest.mark.slow
async def test_plan_run_follow_fail_logs_where_and_stop_over_http(
    jp_serverapp: Any, mcp_url: str
) -> None:
    async with connected(mcp_url, jp_serverapp.identity_provider.token) as client:
        await full_flow(client)


@pytest.mark.slow
async def test_a_foreign_trainjob_is_listed_and_read_over_http(
    jp_serverapp: Any,
    mcp_url: str,
    k8s_trainer_emulator: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Jupyter server's tools see a TrainJob someone else created on the cluster its
    kubeconfig names: listed, status, logs, diagnosis; where, run and stop refused."""
    kubeconfig = k8s_trainer_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # each call's backend reads it
    create_foreign(k8s_trainer_emulator)
    async with connected(mcp_url, jp_serverapp.identity_provider.token) as client:
        await reads_foreign(client, k8s_trainer_emulator)
        await refuses_run_and_stop(client, FOREIGN)
