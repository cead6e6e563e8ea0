"""The /disttrain/api handlers on a real jupyter_server (pytest-jupyter's jp_fetch)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from .jobdirs import write_job

Fetch = Callable[..., Awaitable[Any]]


async def get(jp_fetch: Fetch, *path: str, **params: str) -> Any:
    reply = await jp_fetch("disttrain", "api", "jobs", *path, params=params)
    assert reply.code == 200
    return json.loads(reply.body)


async def test_list_detail_and_logs(jp_fetch: Fetch, job_home: Path) -> None:
    write_job("api-job", nodes=1, nproc=2, steps=3)
    listing = await get(jp_fetch)
    assert [j["id"] for j in listing["jobs"]] == ["local/api-job"]
    assert listing["backends"][0] == {"name": "local", "ok": True, "error": ""}
    assert listing["jobs"][0]["detail"] is None

    deadline = time.monotonic() + 10
    job = await get(jp_fetch, "local", "api-job")
    while job["step"] != 2 and time.monotonic() < deadline:  # replayed in the background
        job = await get(jp_fetch, "local", "api-job")
    assert job["state"] == "Succeeded" and job["step"] == 2
    assert [r["rank"] for r in job["detail"]["ranks"]] == [0, 1]

    logs = await get(jp_fetch, "local", "api-job", "logs", rank="1", tail="1")
    assert logs["text"] == "rank 1 step 2" and logs["ranks"] == [0, 1]
    every = await get(jp_fetch, "local", "api-job", "logs", rank="all")
    assert "[rank 0] rank 0 step 0" in every["text"].splitlines()


async def test_stop_and_errors(jp_fetch: Fetch, job_home: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        directory = write_job("api-run", state="Running", owner_pid=owner.pid)
        reply = await jp_fetch(
            "disttrain", "api", "jobs", "local", "api-run", "stop", method="POST", body=""
        )
        body = json.loads(reply.body)
        assert body["stopped"] and body["job"]["id"] == "local/api-run"
        assert (directory / "stop").exists()
    finally:
        owner.kill()
        owner.wait()

    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("disttrain", "api", "jobs", "local", "no-such-job")
    assert missing.value.code == 404
    assert "no local job named 'no-such-job'" in json.loads(missing.value.response.body)["message"]
    with pytest.raises(HTTPClientError) as bad:
        await jp_fetch("disttrain", "api", "jobs", "local", "api-run", "logs", params={"tail": "x"})
    assert bad.value.code == 400


async def test_requests_need_authentication(jp_fetch: Fetch) -> None:
    with pytest.raises(HTTPClientError) as denied:
        await jp_fetch("disttrain", "api", "jobs", headers={"Authorization": "token wrong"})
    assert denied.value.code == 403
