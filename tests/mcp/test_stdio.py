"""``disttrain mcp`` over stdio, driven by the SDK's client: real jobs, end to end, and a
TrainJob someone else created on the Kubernetes emulator."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
import yaml
from kubernetes import client as k8s
from mcp import Client, StdioServerParameters

from tests.conftest import REPO
from tests.k8s_emulator.emulator import Emulator

from .client import call, full_flow, refuses_run_and_stop, wait_for

pytestmark = pytest.mark.slow

#: A TrainJob as the Kubeflow SDK writes it: nothing of jupyter_disttrain in it.
MANIFEST = REPO / "tests" / "data" / "kubeflow_custom_trainer.yaml"
FOREIGN = "sdk-custom-trainer"
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1", "default", "trainjobs")


def params(home: Path, *flags: str, kubeconfig: str = "/nonexistent") -> StdioServerParameters:
    env = {**os.environ, "DISTRAIN_HOME": str(home), "KUBECONFIG": kubeconfig}
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


def trainjob_names(emulator: Emulator) -> set[str]:
    with emulator.api_client() as api:
        listed = k8s.CustomObjectsApi(api).list_namespaced_custom_object(*TRAINJOBS)
    return {item["metadata"]["name"] for item in listed["items"]}


def test_a_foreign_trainjob_is_listed_and_read_but_not_stopped_unasked(
    k8s_trainer_emulator: Emulator, tmp_path: Path, home: Path
) -> None:
    """A TrainJob created with the kubernetes client (not by this tool): listed with
    everyone=true as someone else's, its status, logs and diagnosis read; where, run and stop
    refused as designed (read-only: the flags; widened: RBAC, then a confirmation)."""
    emulator = k8s_trainer_emulator
    kubeconfig = str(emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    with emulator.api_client() as api:
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            *TRAINJOBS, yaml.safe_load(MANIFEST.read_text())
        )

    async def read_only() -> None:
        async with Client(params(home, kubeconfig=kubeconfig)) as client:
            status = await wait_for(client, FOREIGN, ("Succeeded", "Failed"))
            error, logs = await call(client, "job_logs", name=FOREIGN, tail=50)
            assert status.startswith(f"{FOREIGN}: Succeeded"), (status, logs, emulator.describe())
            # its pods print no rank prefixes: every pod's lines, each with its pod's name
            assert not error and "node 0: step 6/6 loss=0.3333" in logs, logs
            assert f"[{FOREIGN}-node-0-1-" in logs and "] node 1: done" in logs, logs
            error, logs = await call(client, "job_logs", name=FOREIGN, backend="kubernetes",
                                     tail=2)  # fmt: skip
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
            assert not error and diagnosis, diagnosis
            error, where = await call(client, "job_where", name=FOREIGN, backend="kubernetes")
            assert error and "not started by jupyter-disttrain" in where, where
            await refuses_run_and_stop(client, FOREIGN)

    async def widened() -> None:
        flags = ("--allow-run", "--allow-stop")
        async with Client(params(home, *flags, kubeconfig=kubeconfig)) as client:
            emulator.deny(verbs=["delete"], resources=["trainjobs"])
            try:
                error, refused = await call(client, "stop_job", name=FOREIGN, confirm=True)
                assert error and "read-only here: your Kubernetes RBAC" in refused, refused
            finally:
                emulator.clear_faults()
            error, asked = await call(client, "stop_job", name=FOREIGN)
            assert error and "not by jupyter-disttrain" in asked, asked
            assert "needs confirm=true" in asked, asked
            error, refused = await call(client, "debug_send", name=FOREIGN, rank=0, line="p 1",
                                        confirm=True)  # fmt: skip
            assert error and "no job named" in refused, refused
            assert FOREIGN in trainjob_names(emulator)  # nothing deleted unasked
            error, stopped = await call(client, "stop_job", name=FOREIGN, confirm=True)
            assert not error and f"{FOREIGN}: stopped" in stopped, stopped
            assert FOREIGN not in trainjob_names(emulator)

    anyio.run(read_only)
    anyio.run(widened)
