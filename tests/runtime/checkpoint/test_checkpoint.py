"""Worker-side checkpoints: format, atomic save and load, resume rules, crashes, a killed rank."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.backends.local.tailer import job_trust
from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.runtime.checkpoint import api as ck
from jupyter_disttrain.runtime.checkpoint import format as fmt
from jupyter_disttrain.runtime.checkpoint.directory import CheckpointDir
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import Collector
from tests.conftest import REPO, assert_no_processes, submit_now
from tests.signing import parse

# -- the format (pure) ---------------------------------------------------------------


def entry(step: int, token: str = "aaaaaa", t: float = 1.0, **metrics: float) -> fmt.Entry:
    return fmt.make_entry(
        step=step, token=token, layout=fmt.FULL, time=t, nbytes=10, sha256="0" * 64, metrics=metrics
    )


def test_reconcile_reads_only_new_records_and_drops_deleted_ones() -> None:
    cached = {fmt.entry_name(s, "aaaaaa"): entry(s) for s in (1, 2, 3)}
    listed = [fmt.entry_name(s, "aaaaaa") for s in (2, 3, 4)] + [".tmp-x", "junk.json"]
    known, missing = fmt.reconcile(listed, cached)
    assert sorted(known) == [fmt.entry_name(s, "aaaaaa") for s in (2, 3)]
    assert missing == [fmt.entry_name(4, "aaaaaa")]


def test_newest_record_of_a_step_wins_and_retention_keeps_last_and_best() -> None:
    records = {
        fmt.entry_name(10, "aaaaaa"): entry(10, "aaaaaa", 1.0, loss=0.5),
        fmt.entry_name(10, "bbbbbb"): entry(10, "bbbbbb", 2.0, loss=0.4),
        **{fmt.entry_name(s, "cccccc"): entry(s, "cccccc", s, loss=1.0 / s) for s in (20, 30)},
        fmt.entry_name(40, "dddddd"): entry(40, "dddddd", 40.0, loss=0.01, acc=0.2),
        fmt.entry_name(50, "eeeeee"): entry(50, "eeeeee", 50.0, loss=0.3, acc=0.9),
    }
    entries, shadowed = fmt.newest_per_step(records)
    assert [e["step"] for e in entries] == [10, 20, 30, 40, 50]
    assert entries[0]["id"] == "bbbbbb" and shadowed == [fmt.entry_name(10, "aaaaaa")]
    assert [e["step"] for e in fmt.to_prune(entries, 2)] == [10, 20, 30]
    assert fmt.to_prune(entries, 5) == [] and fmt.to_prune(entries, 9) == []
    assert [e["step"] for e in fmt.to_prune(entries, 1, "loss")] == [10, 20, 30]
    assert [e["step"] for e in fmt.to_prune(entries, 1, "acc:max")] == [10, 20, 30, 40]
    assert fmt.to_prune(entries, None) == []
    assert fmt.best_entry(entries, "loss")["step"] == 40  # type: ignore[index]
    with pytest.raises(fmt.CheckpointError, match="METRIC"):
        fmt.parse_best("loss:median")


def test_status_which_and_unreadable_records() -> None:
    e = entry(5)
    assert fmt.status_of(e, {e["path"]: 10}) == (fmt.OK, "")
    assert fmt.status_of(e, {})[0] == fmt.INCOMPLETE
    assert fmt.status_of(e, {e["path"]: 9})[0] == fmt.CORRUPT
    bad = fmt.decode_entry(b"{not json", fmt.entry_name(7, "abcdef"))
    assert bad["status"] == fmt.CORRUPT and bad["step"] == 7
    assert fmt.parse_which(None) == "latest" and fmt.parse_which("12") == 12
    assert fmt.parse_which(torch.tensor(3)) == 3
    assert fmt.parse_which("s3://b/run/step-000000003-abcdef.pt").startswith("s3://")
    with pytest.raises(fmt.CheckpointError):
        fmt.parse_which(-1)
    assert fmt.decode_manifest(b"garbage") == {}


# -- save and load in one process ---------------------------------------------------------


def model_state(step: int) -> dict[str, Any]:
    torch.manual_seed(step)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}


class Custom:
    """A Python object torch's safe loader refuses to build."""

    def __init__(self, value: int) -> None:
        self.value = value


def test_load_uses_the_safe_loader_unless_told_otherwise(ckenv: Path) -> None:
    ck.save_checkpoint({"w": torch.ones(2), "extra": Custom(7)}, 1)
    ck.save_checkpoint({"w": torch.zeros(2), "step": 2}, 2)
    assert float(ck.load_checkpoint(2)["w"].sum()) == 0.0  # tensors and numbers: safe
    with pytest.raises(Exception, match=r"[Ww]eights only load failed|weights_only"):
        ck.load_checkpoint(1)
    assert ck.load_checkpoint(1, weights_only=False)["extra"].value == 7


def test_save_load_retention_and_protocol_line(
    ckenv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ck.load_checkpoint() is None  # a fresh run with nothing to resume
    uris = [
        ck.save_checkpoint(
            model_state(s),
            s,
            {"loss": 1.0 / (s + 1), "acc": s / 100},
            keep_last=2,
            keep_best="acc:max",
        )
        for s in range(0, 60, 10)
    ]
    out = capsys.readouterr().out
    lines = [parse(x, 0) for x in out.splitlines() if x.startswith("##distrain")]
    assert [e.get("step") for e in lines] == [0, 10, 20, 30, 40, 50]
    assert lines[-1].get("uri") == uris[-1] and lines[-1].get("bytes") > 0
    assert lines[-1].get("metrics") == {"loss": 1 / 51, "acc": 0.5}
    assert sorted(p.name for p in ckenv.iterdir()) == [
        ".distrain",
        Path(uris[-2]).name,
        Path(uris[-1]).name,
    ]
    store = CheckpointStore(str(ckenv))
    assert store.steps() == [40, 50]
    got = ck.load_checkpoint("latest")
    assert got["step"] == 50 and torch.equal(
        got["model"]["weight"], model_state(50)["model"]["weight"]
    )
    assert ck.load_checkpoint(40)["step"] == 40
    assert ck.load_checkpoint(uris[-2])["step"] == 40  # a checkpoint URI
    assert ck.load_checkpoint(str(ckenv))["step"] == 50  # a directory URI: its latest
    with pytest.raises(ck.CheckpointError, match=r"no checkpoint 30 .*last steps: 40, 50"):
        ck.load_checkpoint(30)
    info = store.info(50, verify=True)
    assert info.ok and info.world_size == 1 and info.versions["torch"] == torch.__version__
    assert info.tensors == 4 and info.parameters == 2 * (8 + 2)  # weights, biases, momenta
    opt_state = ck.load_checkpoint(50)["optimizer"]
    assert opt_state["param_groups"][0]["momentum"] == 0.9


def test_every_and_background_saves(ckenv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert [s for s in range(35) if ck.every(10, s)] == [10, 20, 30]
    rule = ck.every(seconds=0.0)
    assert rule(1) and rule(2)
    with pytest.raises(ValueError, match="once"):
        ck.every(step=3, seconds=5)
    state = {"w": torch.zeros(1000)}
    uri = ck.save_checkpoint(state, 7, background=True)
    state["w"] += 1  # the loop goes on; the saved copy is the one at the call
    ck.wait_for_saves()
    assert uri is not None and Path(uri).exists()
    assert float(ck.load_checkpoint(7)["w"].sum()) == 0.0
    assert "checkpoint" in capsys.readouterr().out


def test_other_ranks_write_nothing_full(ckenv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    assert ck.save_checkpoint({"x": 1}, 1) is None
    assert not ckenv.exists()


def test_resume_rules_own_latest_after_restart_then_resume_target(
    ckenv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for s in (10, 20, 30):
        ck.save_checkpoint({"step": s}, s)
    # another submission of the job, resuming step 20: --resume wins until it saves itself
    monkeypatch.setenv("DISTRAIN_RUN_ID", "run-2")
    monkeypatch.setenv("DISTRAIN_RESUME", "20")
    assert ck.load_checkpoint() == {"step": 20}
    assert ck.resume_step() == 20
    ck.save_checkpoint({"step": 25}, 25)
    # its workers restart: they continue from its own latest (25), not the older lineage's 30
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert ck.load_checkpoint() == {"step": 25}
    monkeypatch.setenv("DISTRAIN_RUN_ID", "run-3")
    monkeypatch.setenv("DISTRAIN_RESUME", "latest")
    assert ck.load_checkpoint() == {"step": 30}
    monkeypatch.setenv("DISTRAIN_RESUME", "99")
    with pytest.raises(ck.CheckpointError, match="no checkpoint 99"):
        ck.load_checkpoint()
    assert "loaded checkpoint step 30" in capsys.readouterr().out


def test_damaged_latest_falls_back_explicit_step_raises(
    ckenv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for s in (1, 2, 3):
        ck.save_checkpoint({"w": torch.full((100,), float(s))}, s)
    entries = CheckpointDir(str(ckenv)).entries()
    newest = ckenv / entries[-1]["path"]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, wrong content: only the checksum tells
    newest.write_bytes(bytes(data))
    with pytest.raises(ck.CorruptCheckpoint, match="sha256"):
        ck.load_checkpoint(3)
    assert float(ck.load_checkpoint("latest")["w"][0]) == 2.0
    assert "skipping damaged checkpoint" in capsys.readouterr().err
    (ckenv / entries[1]["path"]).unlink()
    assert CheckpointDir(str(ckenv)).entries()[1]["status"] == fmt.INCOMPLETE
    with pytest.raises(ck.CorruptCheckpoint, match="incomplete"):
        ck.load_checkpoint(2)


def test_sharded_in_one_process(ckenv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {"model": {"w": torch.arange(12.0).reshape(3, 4)}, "step": 3}
    uri = ck.save_checkpoint(state, 3, {"loss": 0.5}, sharded=True)
    assert uri is not None and uri.endswith(".dcp") and (Path(uri) / ".metadata").exists()
    whole = ck.load_checkpoint(3)
    assert torch.equal(whole["model"]["w"], state["model"]["w"]) and whole["step"] == 3
    into = {"model": {"w": torch.zeros(3, 4)}, "step": 0}
    assert ck.load_checkpoint(3, into=into) is into
    assert torch.equal(into["model"]["w"], state["model"]["w"])
    details = CheckpointStore(str(ckenv)).describe(3)
    assert [(t.name, t.shape, t.dtype) for t in details.tensors] == [("model.w", (3, 4), "float32")]


def test_local_paths_need_no_fsspec(tmp_path: Path) -> None:
    """A stock image may lack fsspec: saving and loading a local path uses the stdlib alone."""
    script = textwrap.dedent(
        """
        import sys, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("fsspec", "s3fs", "IPython"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import torch
        from jupyter_disttrain import save_checkpoint, load_checkpoint
        save_checkpoint({"w": torch.ones(2)}, 1, keep_last=1)
        save_checkpoint({"w": torch.ones(2) * 2}, 2, keep_last=1)
        print("value", float(load_checkpoint("latest")["w"].sum()))
        """
    )
    env = {**os.environ, "DISTRAIN_CHECKPOINT_DIR": str(tmp_path / "c"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "value 4.0" in done.stdout


# -- crashes while saving --------------------------------------------------------------------


class Saver:
    """The fork server of ``tests/runtime/crash_saver.py``."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.crash_saver"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(10)


def test_killed_while_saving_never_leaves_an_unloadable_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "crash"
    rng = random.Random(5)
    saver = Saver()
    kills, committed, started = 0, 0, time.monotonic()
    try:
        for i in range(24):
            saver.send(f"go {directory} {i * 1000} {rng.choice([50_000, 400_000])} 3")
            line = saver.read()
            assert line.startswith("pid "), line
            pid = int(line.split()[1])
            time.sleep(rng.uniform(0.0, 0.25))
            os.kill(pid, signal.SIGKILL)
            kills += 1
            saver.send("reap")
            saved = []
            while (line := saver.read()) != "reaped":
                saved.append(int(line.split()[1]))
            committed += len(saved)
            store = CheckpointStore(str(directory))
            infos = store.list()
            assert all(c.ok for c in infos), [(c.step, c.status, c.reason) for c in infos]
            for c in infos:  # every listed checkpoint loads (and its checksum matches)
                assert store.load(c.step)["step"] == c.step
            if saved:
                assert saved[-1] in [c.step for c in infos]  # a returned save is durable
            if committed:
                assert store.load("latest")["step"] == max(c.step for c in infos)
    finally:
        saver.close()
    assert kills >= 20 and committed > 0
    assert list(directory.rglob(".tmp-*")), "no kill hit a write in progress"
    cdir = CheckpointDir(str(directory))
    cdir.sweep(older_than=0.0)  # leftovers of killed writers go; the checkpoints stay
    assert not [p for p in directory.rglob(".tmp-*")]
    assert CheckpointStore(str(directory)).load("latest") is not None
    assert time.monotonic() - started < 60


def test_concurrent_writers_lose_no_record(tmp_path: Path) -> None:
    """Two processes saving into one directory at once: every save that returned is listed."""
    directory = tmp_path / "shared"
    savers = [Saver(), Saver()]
    steps: list[int] = []
    try:
        for i, saver in enumerate(savers):
            saver.send(f"go {directory} {i * 100_000} 1000 -1")
        pids = [int(s.read().split()[1]) for s in savers]
        counts = [0, 0]
        deadline = time.monotonic() + 30
        while min(counts) < 40 and time.monotonic() < deadline:
            for i, saver in enumerate(savers):
                counts[i] += saver.read().startswith("saved")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        for saver in savers:
            saver.send("reap")
            while (line := saver.read()) != "reaped":
                steps.append(int(line.split()[1]))
    finally:
        for saver in savers:
            saver.close()
    assert min(counts) >= 40
    cdir = CheckpointDir(str(directory))
    listed = {e["step"] for e in cdir.entries()}
    assert set(steps) <= listed
    assert {s // 100_000 for s in listed} == {0, 1}
    cdir.compact()  # the manifest then holds every record: listing reads no record file
    records, lag = cdir.records()
    assert lag == 0 and {e["step"] for e in records.values()} == listed


# -- real jobs: a killed rank, sharded checkpoints across ranks ---------------------------------


TRAIN = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    state = load_checkpoint()
    start = 0
    if state is not None:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"] + 1
    gen = torch.Generator()
    for step in range(start, STEPS):
        gen.manual_seed(1000 * step + dist.get_rank())  # the data of a step is always the same
        x = torch.randn(32, 8, generator=gen)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        report(step=step, loss=loss)
        if every(10, step):
            save_checkpoint({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                             "step": step}, step, {"loss": loss.item()})
        if step == HOLD and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
            time.sleep(600)  # the first attempt ends by the kill only, however slow the test
        time.sleep(DELAY)
    {"start": start, "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"])}
    """
)


def hello_pid(job_dir: Path, rank: int) -> int:
    """The pid rank ``rank`` announced in its newest ``hello`` line of the job's logs."""
    log = jobdir.logs_dir(job_dir) / f"rank-{rank}.log"
    trust = job_trust(job_dir, 2, 2)  # the job's own key, in its directory
    hellos = [ev.parse_line(x, rank, trust=trust) for x in log.read_text().splitlines()]
    hellos = [e for e in hellos if e.kind == "hello"]
    return int(hellos[-1].get("pid"))


@pytest.mark.slow
def test_killed_rank_restarts_and_resumes_from_last_checkpoint(tmp_path: Path) -> None:
    """2x2, a checkpoint every 10 steps, rank 2 SIGKILLed mid-run, --max-restarts 3."""
    steps, directory = 60, tmp_path / "fault"
    spec = JobSpec(
        "ckpt-fault", nodes=2, nproc=2, max_restarts=3, timeout=150, checkpoint_dir=str(directory)
    )
    sink = Collector()
    hold = 35  # the first attempt waits at this step (past checkpoint 30) to be killed
    payload = build_payload(TRAIN, {"STEPS": steps, "DELAY": 0.05, "HOLD": hold}, job=spec.name)
    run = submit_now(LocalBackend(), spec, payload, sink)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any(
        e.rank == 2 and e.get("step") >= 25 for e in sink.kinds("metric")
    ):
        time.sleep(0.02)
    assert any(e.get("step") == 20 for e in sink.kinds("checkpoint")), sink.kinds("job")
    job_dir = Path(run.plan.job_dir)
    victim = hello_pid(job_dir, 2)
    first_pids = [int(e.get("pid")) for e in sink.kinds("hello")]
    os.kill(victim, signal.SIGKILL)
    assert run.join(150)
    assert sink.kinds("job")[-1].get("state") == "Succeeded", sink.kinds("job")[-1].fields
    assert [e.get("attempt") for e in sink.kinds("restart")] == [1]
    value = decode_result(sink.kinds("result")[0].fields)
    saved = [e.get("step") for e in sink.kinds("checkpoint")]
    resumed_from = value["start"] - 1
    assert value["restart"] == 1 and resumed_from in saved and 20 <= resumed_from < hold
    # the metric stream of every rank: 0.. up to the kill, then on from the checkpoint
    for rank in range(4):
        seen = [
            (e.get("step"), e.get("values")["loss"]) for e in sink.kinds("metric") if e.rank == rank
        ]
        series = [s for s, _ in seen]
        cut = next(i for i in range(1, len(series)) if series[i] <= series[i - 1])
        assert series[:cut] == list(range(cut)), rank
        assert series[cut:] == list(range(resumed_from + 1, steps)), rank  # not from 0
        before = dict(seen[:cut])
        again = [(s, loss) for s, loss in seen[cut:] if s in before]
        assert again, "no step ran both before the kill and after the restart"
        for step, loss in again:  # same weights, same data: the loss continues exactly
            assert loss == pytest.approx(before[step], rel=1e-5), (rank, step)
    assert saved[-1] == 50 and CheckpointStore(str(directory)).steps() == sorted(set(saved))
    assert_no_processes(job_dir, first_pids + [int(e.get("pid")) for e in sink.kinds("hello")])
    # the killed rank, not rank 1 or 3 that only lost their peer, is what it recovered from
    mon = JobMonitor(spec.name, "local", 4, nodes=2, nproc=2)
    mon.feed_many(sink.events)
    agent = [e.get("text") for e in sink.kinds("log") if e.rank is None]
    assert mon.snapshot()["recovered"] == (
        f"recovered from 1 failure (rank 2 was killed (SIGKILL)); resumed from checkpoint "
        f"{resumed_from}"
    ), agent
    assert [r["restarts"] for r in mon.snapshot()["ranks"]] == [1, 1, 1, 1]  # as the header says


SHARDED = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from jupyter_disttrain import save_checkpoint as save, load_checkpoint as load
    rank = dist.get_rank()
    resumed = load()
    state = {"shard": torch.full((4,), float(rank)), "step": 2}
    uri = save(state, 2, {"loss": 0.25}, sharded=True)
    into = {"shard": torch.zeros(4), "step": 0}
    load(2, into=into)
    full = save({"w": torch.arange(3.0)}, 3, background=True)
    {"resumed": resumed, "uri": uri, "shard": into["shard"].tolist(), "full": full}
    """
)


@pytest.mark.slow
def test_sharded_checkpoint_across_ranks_and_resume_by_step(tmp_path: Path) -> None:
    directory = tmp_path / "sharded"
    spec = JobSpec("ckpt-sharded", nodes=1, nproc=2, timeout=120, checkpoint_dir=str(directory))
    sink = Collector()
    run = submit_now(LocalBackend(), spec, build_payload(SHARDED, {}, job=spec.name), sink)
    assert run.join(120)
    assert sink.kinds("job")[-1].get("state") == "Succeeded", sink.kinds("error")
    value = decode_result(sink.kinds("result")[0].fields)
    assert value["resumed"] is None and value["uri"].endswith(".dcp")
    assert value["shard"] == [0.0] * 4  # each rank wrote and read back its own values
    lines = sink.kinds("checkpoint")
    assert sorted((e.get("step"), e.rank) for e in lines) == [(2, 0), (3, 0)]
    files = CheckpointStore(str(directory)).info(2, verify=True).record["files"]
    assert {".metadata", "__0_0.distcp", "__1_0.distcp"} <= set(files)
    resume = spec.with_(name="ckpt-resumed", resume="3")
    sink2 = Collector()
    cell = "x = load_checkpoint()\nx['w'].tolist()"
    run2 = submit_now(LocalBackend(), resume, build_payload(cell, {}, job=resume.name), sink2)
    assert run2.join(120)
    assert decode_result(sink2.kinds("result")[0].fields) == [0.0, 1.0, 2.0]
