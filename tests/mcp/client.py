"""Helpers for tests that talk to the MCP server with the SDK's own client."""

from __future__ import annotations

import re
import time
from typing import Any

from mcp import Client

#: The cell a failing job runs: rank 1 raises after one collective.
FAIL_CELL = """import torch, torch.distributed as dist
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} reduced {t.item()}", flush=True)
if dist.get_rank() == 1:
    raise ValueError("bad batch on rank one")
"""

#: The cell a hung job runs: rank 1 sleeps, rank 0 waits for it in all_reduce.
HANG_CELL = """import time
import torch, torch.distributed as dist
t = torch.ones(1)
dist.all_reduce(t)
print("both ranks up", flush=True)
if dist.get_rank() == 1:
    time.sleep(600)
dist.all_reduce(t)
"""


def text(result: Any) -> str:
    """The text of a tool result."""
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, str]:
    """(is_error, text) of one tool call."""
    result = await client.call_tool(tool, arguments)
    return bool(result.is_error), text(result)


def token_of(plan_text: str) -> str:
    """The plan_token a plan tool answered."""
    found = re.search(r"plan_token: (\S+)", plan_text)
    assert found, plan_text
    return found.group(1)


async def wait_for(client: Client, name: str, words: tuple[str, ...], limit: float = 180) -> str:
    """job_status of ``name`` once it contains one of ``words``."""
    import anyio

    deadline = time.monotonic() + limit
    while True:
        error, status = await call(client, "job_status", name=name)
        if not error and any(w in status for w in words):
            return status
        assert time.monotonic() < deadline, status
        await anyio.sleep(0.5)


async def plan_run(client: Client, name: str, cell: str, options: str = "") -> str:
    """Plan ``cell`` as job ``name``; run refused without the token, then run with it."""
    error, plan = await call(client, "plan_cell", source=cell,
                             options=f"--nodes 1 --nproc 2 --name {name} {options}")
    assert not error, plan
    assert name in plan, plan
    error, refused = await call(client, "run_job", plan_token="")
    assert error and "call plan_cell or plan_script first" in refused, refused
    error, refused = await call(client, "run_job", plan_token=token_of(plan) + "0")
    assert error and "does not match" in refused, refused
    error, started = await call(client, "run_job", plan_token=token_of(plan))
    assert not error and f"started {name}" in started, started
    error, again = await call(client, "run_job", plan_token=token_of(plan))
    assert error and "was used" in again, again
    return plan
