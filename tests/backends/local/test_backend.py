"""The local backend with real torchrun agents, c10d rendezvous and gloo."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend, LocalRun, build_plan, jobdir
from jupyter_disttrain.backends.local.tailer import job_trust
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.spec import JobSpec
from tests.conftest import assert_no_processes, live_job_processes, submit_now

pytestmark = pytest.mark.slow


class Collector:
    """An event sink that keeps everything."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.lock = threading.Lock()

    def __call__(self, event: ev.Event) -> None:
        with self.lock:
            self.events.append(event)

    def kinds(self, kind: str) -> list[ev.Event]:
        with self.lock:
            return [e for e in self.events if e.kind == kind]

    def final(self) -> ev.Event:
        return self.kinds("job")[-1]

    def pids(self) -> list[int]:
        return [int(e.get("pid")) for e in self.kinds("hello")]


def run_job(
    spec: JobSpec,
    cell: str,
    ns: dict[str, Any] | None = None,
    backend: LocalBackend | None = None,
    timeout: float = 120,
) -> tuple[Collector, LocalRun]:
    sink = Collector()
    payload = build_payload(cell, ns or {}, job=spec.name)
    run = submit_now((backend or LocalBackend()), spec, payload, sink)
    assert run.join(timeout), f"job did not finish\n{job_logs(run)}"
    return sink, run


TRAIN = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        x = torch.randn(16, 4)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        report(step=step, loss=loss)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} done")
    {"world": dist.get_world_size(), "weight": model.module.weight.detach().clone()}
    """
)


def test_two_by_two_job_returns_result_metrics_and_rank_logs() -> None:
    spec = JobSpec("local-2x2", nodes=2, nproc=2, timeout=120)
    sink, run = run_job(spec, TRAIN, {"STEPS": 5})
    final = sink.final()
    assert final.get("state") == "Succeeded", sink.events[-20:]
    hellos = sink.kinds("hello")
    assert sorted(e.rank for e in hellos) == [0, 1, 2, 3]
    assert {e.get("node_rank") for e in hellos} == {0, 1}
    assert all(e.get("backend") == "gloo" for e in hellos)
    metrics = sink.kinds("metric")
    assert len(metrics) == 20 and {e.rank for e in metrics} == {0, 1, 2, 3}
    results = sink.kinds("result")
    assert len(results) == 1 and results[0].rank == 0
    value = decode_result(results[0].fields)
    assert value["world"] == 4 and tuple(value["weight"].shape) == (1, 4)
    logs = {e.rank: e.get("text") for e in sink.kinds("log") if e.rank is not None}
    assert logs == {r: f"rank {r} of 4 done" for r in range(4)}
    assert len(sink.kinds("done")) == 4
    backend = LocalBackend()
    assert "rank 3 of 4 done" in backend.logs("local-2x2", rank=3)
    assert "[rank 2] rank 2 of 4 done" in backend.logs("local-2x2")
    record = next(r for r in backend.list_jobs() if r.name == "local-2x2")
    assert record.state == "Succeeded" and record.world_size == 4
    assert_no_processes(Path(run.plan.job_dir), sink.pids())
    # torchrun's folders are the job's: none in the temporary folder
    assert (Path(run.plan.job_dir) / "torchelastic").is_dir()
    assert not list(Path(tempfile.gettempdir()).glob("torchelastic_*/local-2x2_*"))


def test_exception_on_rank_one_fails_job_and_kills_everything() -> None:
    cell = textwrap.dedent(
        """
        import time, torch.distributed as dist
        if dist.get_rank() == 1:
            raise KeyError("missing column 'label'")
        time.sleep(60)  # the others would wait forever in a collective
        """
    )
    started = time.monotonic()
    sink, run = run_job(JobSpec("local-fail", nodes=2, nproc=1, timeout=100), cell)
    assert time.monotonic() - started < 40
    final = sink.final()
    assert final.get("state") == "Failed"
    assert "rank 1: KeyError" in final.get("message")
    errors = sink.kinds("error")
    assert [e.rank for e in errors] == [1]
    assert "<distrain-cell>" in errors[0].get("traceback")
    # the ranks printed nothing: the logs hold the failing rank's traceback, no control line
    logs = LocalBackend().logs("local-fail")
    assert "[rank 1] Traceback (most recent call last):" in logs, logs
    assert logs.splitlines()[-1] == "[rank 1] KeyError: \"missing column 'label'\"", logs
    assert "##distrain" not in logs and "[rank 0]" not in logs, logs
    last = LocalBackend().logs("local-fail", rank=1, tail=1).splitlines()  # the error, whole
    assert last[0] == "Traceback (most recent call last):", last
    assert last[-1] == "KeyError: \"missing column 'label'\"", last
    assert_no_processes(Path(run.plan.job_dir), sink.pids())


def test_stop_ends_every_process() -> None:
    cell = "import time\nfor i in range(600):\n    report(step=i, x=i)\n    time.sleep(0.1)\n"
    sink = Collector()
    payload = build_payload(cell, {}, job="local-stop")
    run = submit_now(LocalBackend(), JobSpec("local-stop", nodes=2, nproc=2), payload, sink)
    deadline = time.monotonic() + 60
    while len(sink.kinds("hello")) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(sink.kinds("hello")) == 4
    pids = sink.pids()
    t0 = time.monotonic()
    run.stop()
    assert run.join(30)
    assert time.monotonic() - t0 < 10
    assert sink.final().get("state") == "Stopped"
    assert_no_processes(Path(run.plan.job_dir), pids)


def test_timeout_fails_job_and_ends_processes() -> None:
    sink, run = run_job(
        JobSpec("local-timeout", nodes=1, nproc=2, timeout=6), "import time\ntime.sleep(120)"
    )
    final = sink.final()
    assert final.get("state") == "Failed" and final.get("reason") == "Timeout"
    assert_no_processes(Path(run.plan.job_dir), sink.pids())


def test_pasted_tutorial_code_runs_unchanged() -> None:
    cell = textwrap.dedent(
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.distributed import DistributedSampler

        def setup():
            dist.init_process_group("gloo")

        def cleanup():
            dist.destroy_process_group()

        setup()
        rank = int(os.environ["RANK"])
        data = TensorDataset(torch.arange(40, dtype=torch.float32))
        sampler = DistributedSampler(data, num_replicas=dist.get_world_size(), rank=rank)
        seen = torch.zeros(40)
        for (batch,) in DataLoader(data, batch_size=5, sampler=sampler):
            seen[batch.long()] += 1
        dist.all_reduce(seen)
        cleanup()
        int(seen.sum().item()), int((seen == 1).sum().item())
        """
    )
    sink, _run = run_job(JobSpec("local-tutorial", nodes=2, nproc=2, timeout=120), cell)
    assert sink.final().get("state") == "Succeeded", [e.fields for e in sink.kinds("error")]
    assert decode_result(sink.kinds("result")[0].fields) == (40, 40)


def test_repeated_fork_launches_never_hang() -> None:
    """Forking from the warm launcher is safe: many jobs in a row all finish promptly."""
    durations = []
    for i in range(8):
        t0 = time.monotonic()
        sink, run = run_job(
            JobSpec(f"local-repeat-{i}", nodes=2, nproc=2, timeout=60),
            TRAIN,
            {"STEPS": 3},
            timeout=90,
        )
        durations.append(time.monotonic() - t0)
        assert sink.final().get("state") == "Succeeded", (i, sink.final().fields)
        assert run.plan.mode == "fork"
        assert_no_processes(Path(run.plan.job_dir), sink.pids())
    assert max(durations) < 60, durations


def test_exec_mode_runs_fresh_interpreters() -> None:
    sink, run = run_job(
        JobSpec("local-exec", nodes=1, nproc=2, timeout=120),
        TRAIN,
        {"STEPS": 2},
        backend=LocalBackend(mode="exec"),
        timeout=150,
    )
    assert run.plan.mode == "exec"
    assert sink.final().get("state") == "Succeeded", sink.final().fields
    assert len(sink.kinds("hello")) == 2


def job_logs(run: LocalRun) -> str:
    """Every agent's and rank's log of a job, for assertion messages."""
    logs = Path(run.plan.job_dir) / "logs"
    return "\n".join(
        f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log"))
    )


#: Exec-mode 2x2 jobs of the teardown test, and how many run at once: two side by side,
#: and a third that starts as the first ends, beside the second (the most CPU of any test
#: here: 16 CPU-seconds a job, each of its six processes importing torch afresh).
EXEC_JOBS, EXEC_AT_ONCE = 3, 2


def _exec_job(i: int) -> str:
    """Run exec-mode job ``i`` to its end; what was wrong with it ("" when nothing)."""
    sink, run = run_job(
        JobSpec(f"local-exec-teardown-{i}", nodes=2, nproc=2, timeout=240),
        TRAIN,
        {"STEPS": 3},
        backend=LocalBackend(mode="exec"),
        timeout=300,
    )
    final = sink.final()
    if final.get("state") != "Succeeded" or "warning" in str(final.get("message")):
        return f"job {i}: {final.fields}\n{job_logs(run)}"
    left = live_job_processes(Path(run.plan.job_dir), sink.pids())
    deadline = time.monotonic() + 15
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = live_job_processes(Path(run.plan.job_dir), sink.pids())
    return f"job {i}: processes left behind: {left}" if left else ""


@pytest.mark.slow
@pytest.mark.timeout(900)  # at most two jobs one after the other, each with a 300 s limit
def test_exec_mode_jobs_side_by_side_all_succeed() -> None:
    """Fresh interpreters end cleanly: teardown after ``done`` never fails a finished rank,
    also while other jobs start, run and end beside it (12 rank teardowns in all)."""
    with ThreadPoolExecutor(EXEC_AT_ONCE) as pool:
        problems = [p for p in pool.map(_exec_job, range(EXEC_JOBS)) if p]
    assert not problems, "\n\n".join(problems)


# Rank 1 aborts at exit, after its ``done`` line, and only once rank 0 has
# ended too: a rank that dies while another is still at work fails the job,
# which is right, and a loaded machine can make rank 0 that slow.
ABORT_AFTER_DONE = textwrap.dedent(
    """
    import atexit, os, pathlib, signal, time
    import torch.distributed as dist
    ended = pathlib.Path(os.environ["DISTRAIN_JOB_DIR"]) / "rank-0-ended"
    def abort_once_rank_0_ended():
        deadline = time.monotonic() + 60
        while not ended.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGABRT)
    if dist.get_rank() == 1:
        atexit.register(abort_once_rank_0_ended)
    else:
        atexit.register(ended.touch)
    report(step=0, ok=1)
    """
)


def test_a_rank_that_dies_after_done_leaves_the_job_succeeded_with_a_warning() -> None:
    sink, run = run_job(
        JobSpec("local-late-abort", nodes=1, nproc=2, timeout=120),
        ABORT_AFTER_DONE,
        backend=LocalBackend(mode="exec"),
        timeout=150,
    )
    final = sink.final()
    assert final.get("state") == "Succeeded", (final.fields, job_logs(run))
    assert "rank 1 (SIGABRT) died after finishing" in str(final.get("message")), final.fields
    assert (Path(run.plan.job_dir) / "logs" / "rank-1.log").exists()
    assert len(sink.kinds("done")) == 2


def test_job_state_is_readable_by_its_owner_only(home: Path) -> None:
    """The payload holds captured notebook values: nobody else may read it or the logs."""
    sink, run = run_job(
        JobSpec("local-private", nodes=1, nproc=2, timeout=120),
        "1",
        backend=LocalBackend(mode="exec"),
        timeout=150,
    )
    assert sink.final().get("state") == "Succeeded", job_logs(run)
    directory = Path(run.plan.job_dir)
    for path in (home / "jobs", directory, directory / "logs"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    files = [p for p in directory.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {
        "payload.pkl",
        "state.json",
        "events.jsonl",
        "rank-0.log",
        "rank-1.log",
        "agent-0.log",
    }
    loose = {
        str(p): oct(stat.S_IMODE(p.stat().st_mode))
        for p in files
        if stat.S_IMODE(p.stat().st_mode) & 0o077
    }
    assert not loose, loose


def listening(run: LocalRun) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, command) of every listening socket of every process of a job.

    The job's processes: its group's members, its agents and all their descendants
    (torchrun starts each worker in a session of its own).
    """
    assert run.pgid is not None
    procs = {p.pid: p for p in psutil.process_iter() if _pgid(p.pid) == run.pgid}
    for agent in run.agents:
        with contextlib.suppress(psutil.Error):
            procs.setdefault(agent.pid, psutil.Process(agent.pid))
    for proc in list(procs.values()):
        with contextlib.suppress(psutil.Error):
            procs.update((c.pid, c) for c in proc.children(recursive=True))
    found = []
    for proc in procs.values():
        try:
            command = " ".join(proc.cmdline())[:80]
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((conn.laddr.ip, conn.laddr.port, proc.pid, command))
        except psutil.Error:
            continue
    return found


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@pytest.mark.parametrize(
    ("mode", "nodes", "nproc", "restarts"),
    [("fork", 2, 1, 0), ("exec", 2, 1, 0), ("fork", 2, 2, 1), ("exec", 2, 2, 1)],
    ids=["fork", "exec", "fork-restarts", "exec-restarts"],
)
def test_every_listening_socket_of_a_job_is_on_loopback(
    mode: str, nodes: int, nproc: int, restarts: int
) -> None:
    """With ``--max-restarts`` rank 0's worker hosts the workers' store: on loopback too."""
    spec = JobSpec(
        f"local-listen-{mode}-{restarts}",
        nodes=nodes,
        nproc=nproc,
        max_restarts=restarts,
        timeout=120,
    )
    sink = Collector()
    payload = build_payload("import time\nreport(step=0, up=1)\ntime.sleep(60)", {}, job=spec.name)
    run = submit_now(LocalBackend(mode=mode), spec, payload, sink)
    try:
        deadline = time.monotonic() + 120
        while len(sink.kinds("metric")) < spec.world_size and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(sink.kinds("metric")) == spec.world_size, job_logs(run)
        sockets = listening(run)
        # the rendezvous store, the workers' store and gloo's listeners at least
        assert len(sockets) >= 2 + spec.world_size, sockets
        if restarts:  # rank 0 hosts the workers' store (and its gloo listener)
            rank0 = next(int(e.get("pid")) for e in sink.kinds("hello") if e.rank == 0)
            assert len([s for s in sockets if s[2] == rank0]) >= 2, sockets
        wide = [s for s in sockets if s[0] not in ("127.0.0.1", "::1")]
        assert not wide, (wide, job_logs(run))
    finally:
        run.stop()
        run.join(30)


OWNER = textwrap.dedent(
    """
    import sys, time
    from jupyter_disttrain.backends.local import LocalBackend
    from jupyter_disttrain.payload import build_payload
    from jupyter_disttrain.spec import JobSpec
    cell = "import time\\nreport(step=0, up=1)\\ntime.sleep(300)"
    backend = LocalBackend()
    spec = JobSpec("local-owner", nodes=2, nproc=1)
    run = backend.submit(backend.plan(spec, build_payload(cell, {}, job="local-owner")),
                         lambda e: None)
    print("submitted", flush=True)
    time.sleep(600)
    """
)


def test_owner_death_ends_the_job(home: Path) -> None:
    """If the kernel dies (SIGKILL), the launcher takes every job process down with it."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert owner.stdout is not None and owner.stdout.readline().strip() == "submitted"
    directory = jobdir.job_dir("local-owner")
    log0 = jobdir.logs_dir(directory) / "rank-0.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "metric" not in (
        log0.read_text() if log0.exists() else ""
    ):
        time.sleep(0.2)
    trust = job_trust(directory, 2, 1)
    pids = [
        int(ev.parse_line(x, 0, trust=trust).get("pid"))
        for f in jobdir.rank_logs(directory).values()
        for x in f.read_text().splitlines()
        if '"hello"' in x
    ]
    assert len(pids) == 2
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    assert_no_processes(directory, pids, wait=15)
    record = next(r for r in LocalBackend().list_jobs() if r.name == "local-owner")
    assert record.state == "Stopped"


def test_dry_run_plan_is_printable_and_starts_nothing(home: Path) -> None:
    spec = JobSpec("local-plan", nodes=2, nproc=3, env=(("LR", "0.1"),))
    payload = build_payload("1", {}, job="local-plan")
    plan = build_plan(spec, payload, home / "jobs" / "local-plan", mode="fork", port=29999)
    text = str(plan)
    assert "2 node(s) x 3 process(es) = 6 rank(s)" in text
    assert "c10d at 127.0.0.1:29999" in text
    assert text.count("torchrun --nnodes 2 --nproc-per-node 3") == 2
    assert "is_host=1" in text and "is_host=0" in text and "LR=0.1" in text
    assert not (home / "jobs" / "local-plan").exists()
    dry = LocalBackend().plan(spec, payload)
    assert "127.0.0.1:" in str(dry) and not jobdir.job_dir("local-plan").exists()


PREEMPTED = textwrap.dedent(
    """
    import time, torch, torch.distributed as dist
    state = load_checkpoint() or {"step": -1, "w": torch.zeros(1)}
    start, w = state["step"] + 1, state["w"]
    for step in range(start, 80):
        t = torch.ones(1)
        dist.all_reduce(t)
        w += 1
        report(step=step, w=float(w))
        if every(1000, step):  # no periodic checkpoint would be reached
            save_checkpoint({"step": step, "w": w}, step)
        time.sleep(0.05)
    {"w": float(w), "start": start}
    """
)


def test_sigterm_to_a_rank_saves_a_last_checkpoint_and_resumes_with_no_lost_step(
    tmp_path: Path,
) -> None:
    spec = JobSpec(
        "local-preempt",
        nodes=2,
        nproc=2,
        max_restarts=1,
        timeout=240,
        checkpoint_dir=str(tmp_path / "ckpt"),
        grace_period=20,
    )
    sink = Collector()
    run = submit_now(LocalBackend(), spec, build_payload(PREEMPTED, {}, job=spec.name), sink)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        steps = [e.get("step") for e in sink.kinds("metric") if e.rank == 2]
        if steps and max(steps) >= 10:
            break
        time.sleep(0.1)
    reached = max(e.get("step") for e in sink.kinds("metric") if e.rank == 2)
    rank2 = next(int(e.get("pid")) for e in sink.kinds("hello") if e.rank == 2)
    os.kill(rank2, signal.SIGTERM)
    assert run.join(240), job_logs(run)
    final = sink.final()
    assert final.get("state") == "Succeeded", (final.fields, job_logs(run))
    result = [e for e in sink.kinds("result")][-1]
    from jupyter_disttrain.results import decode_result

    value = decode_result(result.fields)
    assert value["w"] == 80.0, (value, job_logs(run))  # every step counted exactly once
    assert value["start"] > reached, (value, reached, job_logs(run))  # resumed past it
    assert len(sink.kinds("checkpoint")) == 1, sink.kinds("checkpoint")
    assert_no_processes(Path(run.plan.job_dir), sink.pids())
