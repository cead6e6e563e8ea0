"""Helpers for tests that talk to the MCP server with the SDK's own client."""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
import yaml
from kubernetes import client as k8s
from mcp import Client

from tests.conftest import REPO
from tests.k8s_emulator.emulator import Emulator

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


async def refuses_run_and_stop(client: Client, name: str) -> None:
    """A read-only server plans a job but refuses to run it, stop ``name`` or send to a
    paused rank, each time naming the flag that widens it."""
    error, plan = await call(
        client, "plan_cell", source="x = 1", options="--nodes 1 --nproc 2 --name mcp-ro"
    )
    assert not error, plan
    error, refused = await call(client, "run_job", plan_token=token_of(plan))
    assert error and "read-only" in refused and "--allow-run" in refused, refused
    error, refused = await call(client, "stop_job", name=name, confirm=True)
    assert error and "read-only" in refused and "--allow-stop" in refused, refused
    error, refused = await call(client, "debug_send", name=name, rank=0, line="p 1", confirm=True)
    assert error and "--allow-run" in refused, refused


async def until(
    client: Client, tool: str, words: tuple[str, ...], limit: float = 180, **arguments: Any
) -> str:
    """The answer of ``tool`` once it contains one of ``words``; fails after ``limit`` seconds
    with the last answer and the job's logs (``name`` among ``arguments``)."""
    deadline = time.monotonic() + limit
    while True:
        error, answer = await call(client, tool, **arguments)
        if not error and any(w in answer for w in words):
            return answer
        if time.monotonic() > deadline:
            _, logs = await call(client, "job_logs", name=arguments.get("name", ""), tail=200)
            raise AssertionError(f"{tool} never said {words} in {limit:.0f} s: {answer}\n{logs}")
        await anyio.sleep(0.5)


async def wait_for(client: Client, name: str, words: tuple[str, ...], limit: float = 180) -> str:
    """job_status of ``name`` once it contains one of ``words``."""
    return await until(client, "job_status", words, limit, name=name)


async def plan_run(client: Client, name: str, cell: str, options: str = "") -> str:
    """Plan ``cell`` as job ``name``; run refused without the token, then run with it."""
    error, plan = await call(
        client, "plan_cell", source=cell, options=f"--nodes 1 --nproc 2 --name {name} {options}"
    )
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


async def full_flow(client: Client) -> None:
    """Plan and run a failing and a hung 1x2 job; follow, name the failing rank, read logs,
    ask where the hung one is, stop it."""
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
    await until(client, "job_logs", ("both ranks up",), name="mcp-hang", tail=20)
    error, where = await call(client, "job_where", name="mcp-hang", timeout=60)
    assert not error and "time.sleep" in where and "all_reduce" in where, where
    error, refused = await call(client, "stop_job", name="mcp-hang")
    assert error and "needs confirm=true" in refused, refused
    error, stopped = await call(client, "stop_job", name="mcp-hang", confirm=True)
    assert not error and "mcp-hang: Stopped" in stopped, stopped
    error, listed = await call(client, "list_jobs")
    assert "mcp-hang\tStopped" in listed and "mcp-fail\tFailed" in listed, listed


#: A TrainJob as the Kubeflow SDK writes it (``kubectl create -f``): nothing of ours in it.
MANIFEST = REPO / "tests" / "data" / "kubeflow_custom_trainer.yaml"
FOREIGN = "sdk-custom-trainer"
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "default", "trainjobs")


def create_foreign(emulator: Emulator) -> None:
    """Create the TrainJob with the kubernetes client, as someone else would."""
    with emulator.api_client() as api:
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            *TRAINJOBS, yaml.safe_load(MANIFEST.read_text())
        )


def trainjob_names(emulator: Emulator) -> set[str]:
    """The TrainJobs of the emulator's namespace, as the API lists them."""
    with emulator.api_client() as api:
        listed = k8s.CustomObjectsApi(api).list_namespaced_custom_object(*TRAINJOBS)
    return {item["metadata"]["name"] for item in listed["items"]}


async def reads_foreign(client: Client, emulator: Emulator) -> None:
    """The foreign TrainJob followed to its end by name, listed with everyone=true as someone
    else's (not without), its logs and diagnosis read; where refused."""
    status = await wait_for(client, FOREIGN, ("Succeeded", "Failed"))
    error, logs = await call(client, "job_logs", name=FOREIGN, tail=50)
    assert status.startswith(f"{FOREIGN}: Succeeded"), (status, logs, emulator.describe())
    # its pods print no rank prefixes: every pod's lines, each with its pod's name
    assert not error and "node 0: step 6/6 loss=0.3333" in logs, logs
    assert f"[{FOREIGN}-node-0-1-" in logs and "] node 1: done" in logs, logs
    error, logs = await call(client, "job_logs", name=FOREIGN, backend="kubernetes", tail=2)
    assert not error and len(logs.splitlines()) == 2, logs
    error, grep = await call(client, "job_logs", name=FOREIGN, grep=r"loss=0\.3333")
    assert not error and "node 0: step 6/6" in grep and "node 1: step 6/6" in grep, grep
    error, listed = await call(client, "list_jobs", everyone=True)
    row = next((r for r in listed.splitlines() if f"\t{FOREIGN}\t" in r), "")
    assert not error and row.startswith(f"kubernetes\t{FOREIGN}\tSucceeded\t2x1"), listed
    assert "\tsomeone else\t" in row, row
    error, mine = await call(client, "list_jobs")
    assert not error and FOREIGN not in mine, mine  # not this tool's job
    error, diagnosis = await call(client, "job_diagnosis", name=FOREIGN)
    assert not error and diagnosis == "nothing to report", diagnosis
    error, where = await call(client, "job_where", name=FOREIGN, backend="kubernetes")
    assert error and "not started by jupyter-disttrain" in where, where
