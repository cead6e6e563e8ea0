"""A backend is its core; the rest is optional features, asked for before use.

The toy backend here, added from this test as a third party would, has only
the core: its plan is a list of plain ``python -m ...worker`` commands (one
per rank, no torchrun, no launcher), its submission runs them as local
subprocesses and reads their output into events. It plans (``--dry-run``),
runs a real two-rank job through the job service, and the service says
clearly which optional feature it lacks when one is asked of it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends import optional, registry
from jupyter_disttrain.backends.base import (
    Backend,
    BackendError,
    Capabilities,
    EventSink,
    JobRecord,
    Plan,
    Submission,
)
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.backends.local.plan import free_port
from jupyter_disttrain.backends.streams import line_events
from jupyter_disttrain.payload import Payload
from jupyter_disttrain.runtime import jobkey
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec


class ProcPlan(Plan):
    """One command per rank, with its environment."""

    def __init__(self, spec: JobSpec, payload: Payload, directory: Path, port: int) -> None:
        self.spec = spec
        self.payload = payload
        self.directory = directory
        self.commands = [
            (
                {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank % spec.nproc),
                    "WORLD_SIZE": str(spec.world_size),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "GLOO_SOCKET_IFNAME": "lo",
                    jobkey.ENV_KEY_FILE: str(directory / jobkey.KEY_FILE),
                    "PYTHONUNBUFFERED": "1",
                },
                [sys.executable, "-m", "jupyter_disttrain.runtime.worker", "payload.pkl"],
            )
            for rank in range(spec.world_size)
        ]

    def __str__(self) -> str:
        lines = [f"job {self.spec.name}: {self.spec.world_size} plain processes"]
        for env, argv in self.commands:
            shown = " ".join(f"{k}={v}" for k, v in env.items() if k in ("RANK", "WORLD_SIZE"))
            lines.append(f"  {shown} {shlex.join(argv)}")
        return "\n".join(lines)


class ProcRun(Submission):
    """The ranks as subprocesses; one thread per rank turns its output lines into events."""

    def __init__(self, plan: ProcPlan, sink: EventSink) -> None:
        self.plan = plan
        self.sink = sink
        self.done = threading.Event()
        self.stopped = False
        trust = ev.Trust.of(plan.payload.key, plan.spec.nodes, plan.spec.nproc)
        self.procs = [
            subprocess.Popen(
                argv,
                cwd=plan.directory,
                env={**_base_env(), **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for env, argv in plan.commands
        ]
        self.readers = [
            threading.Thread(target=self._read, args=(rank, proc, trust), daemon=True)
            for rank, proc in enumerate(self.procs)
        ]
        for reader in self.readers:
            reader.start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _read(self, rank: int, proc: subprocess.Popen[bytes], trust: ev.Trust) -> None:
        assert proc.stdout is not None
        with open(self.plan.directory / f"rank-{rank}.log", "wb") as log:
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                for event in line_events(raw, rank, trust):  # the path every backend shares
                    self.sink(event)

    def _wait(self) -> None:
        codes = [proc.wait() for proc in self.procs]
        for reader in self.readers:
            reader.join()
        for rank, code in enumerate(codes):
            self.sink(ev.rank_event(rank, "Exited", exit_code=code))
        state = "Stopped" if self.stopped else "Succeeded" if not any(codes) else "Failed"
        self.sink(ev.job_event(state, reason="" if state == "Succeeded" else f"exit {codes}"))
        self.done.set()

    def stop(self, reason: str = "stopped by user") -> None:
        self.stopped = True
        for proc in self.procs:
            proc.terminate()

    def join(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("DISTRAIN_")}


class ProcBackend(Backend):
    """Only the core: plan, submit (and follow through the sink), list, logs, stop."""

    name = "toyproc"
    capabilities = Capabilities(frameworks=frozenset({"pytorch"}))
    root: ClassVar[Path] = Path("/nonexistent")
    runs: ClassVar[dict[str, ProcRun]] = {}

    def plan(self, spec: JobSpec, payload: Payload) -> ProcPlan:
        return ProcPlan(spec, payload, self.root / spec.name, free_port())

    def submit(self, plan: Plan, sink: EventSink) -> ProcRun:
        assert isinstance(plan, ProcPlan)
        plan.directory.mkdir(parents=True)
        (plan.directory / "payload.pkl").write_bytes(plan.payload.data)
        (plan.directory / jobkey.KEY_FILE).write_bytes(plan.payload.key)
        run = self.runs[plan.spec.name] = ProcRun(plan, sink)
        return run

    def list_jobs(self) -> list[JobRecord]:
        return [
            JobRecord(name, self.name, "Running", r.plan.spec.world_size, 1, 1, 0.0)
            for name, r in self.runs.items()
        ]

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        ranks = range(self.runs[name].plan.spec.world_size) if rank is None else [rank]
        directory = self.root / name
        return "".join((directory / f"rank-{r}.log").read_text() for r in ranks)

    def stop(self, name: str) -> bool:
        run = self.runs.get(name)
        if run is None or run.done.is_set():
            return False
        run.stop()
        return True


@pytest.fixture
def toyproc(tmp_path: Path) -> Any:
    """The toy backend registered under ``toyproc`` for this test, its jobs under tmp_path."""
    ProcBackend.root = tmp_path
    ProcBackend.runs = {}
    registry.register("toyproc", ProcBackend)
    try:
        yield ProcBackend
    finally:
        for run in ProcBackend.runs.values():
            run.stop()
            run.join(30)
        registry.unregister("toyproc")


def test_the_built_in_backends_offer_every_feature_they_did() -> None:
    every = set(optional.FEATURES)
    assert set(optional.offered(KubernetesBackend())) == every
    assert set(optional.offered(LocalBackend())) == every - {
        optional.NAMESPACE,
        optional.RUNTIMES,
    }


def test_capabilities_ask_no_question_of_one_engine() -> None:
    """A capability names what a caller needs (remote workers, exported plans), never
    one engine's objects: no caller asks a backend whether it has pods or manifests."""
    engine_words = ("pod", "manifest", "kube", "namespace", "kubelet", "crd")
    names = [f.name for f in fields(Capabilities)]
    assert "remote_workers" in names and "exports_plans" in names, names
    assert [n for n in names if any(w in n for w in engine_words)] == [], names
    assert KubernetesBackend.capabilities.remote_workers
    assert not LocalBackend.capabilities.remote_workers


def test_a_core_only_backend_offers_nothing_optional_and_says_so(toyproc: Any) -> None:
    backend = registry.get_backend("toyproc")
    assert optional.offered(backend) == ()
    with pytest.raises(optional.MissingFeature) as caught:
        optional.CONTROLS.of(backend)
    assert str(caught.value) == (
        "the toyproc backend cannot reach a running job's ranks (pause, breakpoints); put "
        "breakpoint() in the cell, or set breakpoints in its gutter before it runs"
    )
    assert isinstance(caught.value, BackendError) and caught.value.feature is optional.CONTROLS


def test_the_toy_backend_plans_a_dry_run(toyproc: Any) -> None:
    service = JobService()
    spec = JobSpec("toy-dry", nodes=1, nproc=2, backend="toyproc").with_()
    plan = service.plan(spec, "x = 1")
    shown = str(plan)
    assert shown.startswith("job toy-dry: 2 plain processes"), shown
    assert "RANK=1 WORLD_SIZE=2" in shown and "jupyter_disttrain.runtime.worker" in shown
    assert not (toyproc.root / "toy-dry").exists()  # planning writes nothing


@pytest.mark.slow
def test_the_toy_backend_runs_a_real_job_and_lacks_features_clearly(toyproc: Any) -> None:
    service = JobService()
    spec = JobSpec("toy-run", nodes=1, nproc=2, backend="toyproc", timeout=120).with_()
    cell = (
        "import torch.distributed as dist\n"
        "t = __import__('torch').tensor([dist.get_rank() + 1.0])\n"
        "dist.all_reduce(t)\n"
        "report(step=1, loss=float(t))\n"
        "int(t)"
    )
    job = service.run(service.plan(spec, cell))
    logs = lambda: service.backend("toyproc").logs("toy-run")  # noqa: E731
    assert job.wait(120) == "Succeeded", (job.reason, logs())
    assert job.result() == 3, logs()
    assert job.metrics().column("loss") == [3.0, 3.0], logs()  # each rank reported
    # optional features the core lacks: named, with the way out, before anything is tried
    with pytest.raises(optional.MissingFeature, match="the toyproc backend cannot follow a job"):
        service.attach("toy-run", "toyproc")
    with pytest.raises(optional.MissingFeature, match="the toyproc backend cannot reach a runn"):
        job.pause()
    assert job.set_breakpoints([{"line": 1}]) is False
    # the notebook's doors say the same as usage errors
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_disttrain")
    with pytest.raises(UsageError, match="the toyproc backend cannot follow a job this process"):
        shell.run_line_magic("distrain_attach", "toy-run --backend toyproc")
    with pytest.raises(UsageError, match="the toyproc backend cannot follow a job this process"):
        shell.run_line_magic("distrain_where", "toy-run")  # found on toyproc by its listing
