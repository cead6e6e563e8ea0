"""The server extension asks jupyter_server's authorizer: read to look, write to stop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from .jobdirs import write_job
from .test_handlers import Fetch, get


class ReadOnly(Authorizer):
    """A user who may look at jobs but not change them."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return action == "read"


@pytest.fixture
def jp_server_config(job_home: Path) -> dict[str, object]:
    """The server extension, with a read-only authorizer."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_disttrain.server": True},
            "authorizer_class": ReadOnly,
        }
    }


async def test_a_read_only_user_lists_jobs_but_cannot_stop_them(
    jp_fetch: Fetch, job_home: Path
) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        directory = write_job("api-ro", state="Running", owner_pid=owner.pid)
        listing = await get(jp_fetch)
        assert [j["id"] for j in listing["jobs"]] == ["local/api-ro"]
        assert (await get(jp_fetch, "local", "api-ro", "logs"))["id"] == "local/api-ro"
        with pytest.raises(HTTPClientError) as denied:
            await jp_fetch(
                "disttrain", "api", "jobs", "local", "api-ro", "stop", method="POST", body=""
            )
        assert denied.value.code == 403, json.loads(denied.value.response.body)
        assert not (directory / "stop").exists()
    finally:
        owner.kill()
        owner.wait()
