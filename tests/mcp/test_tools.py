"""The tool list and each tool's schema, read with the SDK's client in process."""

from __future__ import annotations

import anyio
from mcp import Client

from jupyter_disttrain.mcp import MUTATING, READ_ONLY, Permissions, build_server
from jupyter_disttrain.service import JobService

REQUIRED = {
    "plan_cell": ["source", "options"],
    "plan_script": ["path", "options"],
    "run_job": ["plan_token"],
    "list_jobs": [],
    "job_status": ["name"],
    "job_logs": ["name"],
    "job_where": ["name"],
    "job_diagnosis": ["name"],
    "job_metrics": ["name"],
    "checkpoints": ["uri"],
    "session_cells": [],
    "stop_job": ["name"],
    "debug_send": ["name", "rank", "line"],
}


def test_every_tool_is_listed_with_its_required_fields_and_descriptions() -> None:
    async def main() -> None:
        server = build_server(JobService(), Permissions())
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
        assert sorted(t.name for t in tools) == sorted(REQUIRED), [t.name for t in tools]
        assert set(REQUIRED) == set(READ_ONLY) | set(MUTATING)
        for tool in tools:
            schema = tool.input_schema
            assert sorted(schema.get("required", [])) == sorted(REQUIRED[tool.name]), tool
            assert tool.description and len(tool.description) > 20, tool
            for field, prop in schema["properties"].items():
                if field in ("name", "options", "plan_token", "confirm", "backend", "uri"):
                    assert prop.get("description"), (tool.name, field, prop)

    anyio.run(main)
