"""The tools, with the SDK's client in process: the tool list and each tool's schema; the
read tools (metrics, diagnosis, checkpoints), debug_send and session_cells on real local jobs."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from jupyter_disttrain.mcp import MUTATING, READ_ONLY, Permissions, build_server
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec

from .client import call, token_of, until

PAUSED = "mcp-paused"

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


# --- the read tools on one real job, paused at a breakpoint ----------------------------------

#: Rank 0 and 1 report three steps and save three checkpoints; rank 1 then stops at
#: ``breakpoint()`` (rank 0 waits for it in an all_reduce).
PAUSING_CELL = """import torch, torch.distributed as dist
rank = dist.get_rank()
for step in range(3):
    report(step=step, loss=1.0 / (step + 1) + rank)
    save_checkpoint({"step": step, "w": torch.full((2,), float(step))}, step,
                    {"loss": 1.0 / (step + 1)})
t = torch.ones(1)
dist.all_reduce(t)
if rank == 1:
    breakpoint()
    after = step * 10
dist.all_reduce(t)
"""


@dataclass
class Paused:
    """The job of this module: its server (widened), its service and checkpoint folder."""

    server: MCPServer
    service: JobService
    checkpoints: Path

    def logs(self) -> str:
        return self.service.registered()[PAUSED].logs()


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paused]:
    """A 1x2 job planned and run through the tools, once rank 1 is paused."""
    folder = tmp_path_factory.mktemp("mcp-ckpt")
    service = JobService()
    job = Paused(build_server(service, Permissions(run=True, stop=True)), service, folder)
    options = f"--nodes 1 --nproc 2 --name {PAUSED} --checkpoint-dir {folder}"

    async def start() -> None:
        async with Client(job.server) as client:
            error, plan = await call(client, "plan_cell", source=PAUSING_CELL, options=options)
            assert not error, plan
            error, started = await call(client, "run_job", plan_token=token_of(plan))
            assert not error, started
            await until(client, "job_diagnosis", ("rank 1 paused",), name=PAUSED)

    try:
        anyio.run(start)
        yield job
    finally:
        for started in service.registered().values():
            if not started.done:
                started.stop()


@pytest.mark.slow
def test_job_metrics_summarises_what_each_rank_reported(paused: Paused) -> None:
    async def main() -> None:
        async with Client(paused.server) as client:
            summary = await until(client, "job_metrics", ("loss: 6 values",), name=PAUSED)
            # the newest step's value of the lowest rank; min and max over both ranks
            assert summary == "loss: 6 values, at step 2 0.333333 (rank 0), min 0.333333, max 2"
            error, none = await call(client, "job_metrics", name="no-such-job")
            assert error and "no job named 'no-such-job' was started or followed" in none, none

    anyio.run(main)


@pytest.mark.slow
def test_job_diagnosis_says_which_rank_is_paused_where(paused: Paused) -> None:
    async def main() -> None:
        async with Client(paused.server) as client:
            error, diagnosis = await call(client, "job_diagnosis", name=PAUSED)
            line = PAUSING_CELL.splitlines().index("    breakpoint()") + 2
            assert not error and diagnosis == f"rank 1 paused at cell:{line} in <module>", (
                diagnosis,
                paused.logs(),
            )
            error, missing = await call(client, "job_diagnosis", name="no-such-job")
            assert error and "no job named 'no-such-job'" in missing, missing

    anyio.run(main)


@pytest.mark.slow
def test_checkpoints_lists_a_jobs_and_verify_finds_a_flipped_byte(
    paused: Paused, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(paused.checkpoints, copy)

    async def main() -> None:
        async with Client(paused.server) as client:
            error, listed = await call(client, "checkpoints", uri=PAUSED)
            assert not error, (listed, paused.logs())
            rows = listed.splitlines()
            assert rows[0] == f"{paused.checkpoints}: 3 checkpoint(s)", listed
            assert [r.split("\t")[0] for r in rows[1:]] == ["0", "1", "2"], listed
            assert all(r.split("\t")[2].startswith("ok") for r in rows[1:]), listed
            error, verified = await call(client, "checkpoints", uri=str(copy), verify=True)
            assert not error and verified.count("\tok") == 3, verified
            newest = next(line.split("\t")[1] for line in rows[1:] if line.startswith("2\t"))
            damaged = copy / Path(newest).relative_to(paused.checkpoints)
            data = bytearray(damaged.read_bytes())
            data[len(data) // 2] ^= 1  # same size: only the checksum tells
            damaged.write_bytes(bytes(data))
            error, listed = await call(client, "checkpoints", uri=str(copy))
            assert not error and listed.count("\tok") == 3, listed
            error, verified = await call(client, "checkpoints", uri=str(copy), verify=True)
            assert not error and verified.count("\tok") == 2, verified
            row = next(line for line in verified.splitlines() if line.startswith("2\t"))
            assert "\tcorrupt" in row and "sha256" in row, verified
            error, missing = await call(client, "checkpoints", uri=str(tmp_path / "none"))
            assert not error and missing.endswith("none: 0 checkpoint(s)"), missing

    anyio.run(main)


@pytest.mark.slow
def test_debug_send_needs_the_run_flag_and_a_confirmation(paused: Paused) -> None:
    async def main() -> None:
        read_only = build_server(paused.service, Permissions())
        async with Client(read_only) as client:
            error, refused = await call(
                client, "debug_send", name=PAUSED, rank=1, line="p step", confirm=True
            )
            assert error and "read-only" in refused and "--allow-run" in refused, refused
        async with Client(paused.server) as client:
            error, refused = await call(client, "debug_send", name=PAUSED, rank=1, line="p step")
            assert error and "needs confirm=true" in refused, refused
            error, answer = await call(
                client, "debug_send", name=PAUSED, rank=1, line="p step, rank", confirm=True
            )
            assert not error and answer == "(2, 1)\n", (answer, paused.logs())
            error, refused = await call(
                client, "debug_send", name=PAUSED, rank=0, line="p step", confirm=True
            )
            assert error and "rank 0 of job mcp-paused is not paused" in refused, refused
            assert "Traceback" not in refused, refused

    anyio.run(main)


@pytest.mark.slow
def test_session_cells_shows_the_servers_sessions(tmp_path: Path) -> None:
    service = JobService()
    server = build_server(service, Permissions())

    async def listed() -> str:
        async with Client(server) as client:
            error, table = await call(client, "session_cells")
            assert not error, table
            return table

    assert anyio.run(listed).startswith("no sessions")
    session = service.start_session(JobSpec("mcp-session", nodes=1, nproc=2))
    try:
        assert session.run("x = 6 * 7\nx") == 42, session.job and session.job.logs()
        table = anyio.run(listed).splitlines()
        assert table[0].split() == [
            "NAME",
            "BACKEND",
            "RANKS",
            "STATE",
            "CELLS",
            "RESTARTS",
            "IDLE",
        ]
        assert table[1].split()[:6] == ["mcp-session", "local", "1x2", "idle", "1", "0"], table
    finally:
        service.stop_session("mcp-session")
    assert anyio.run(listed).startswith("no sessions")  # a stopped session is gone
