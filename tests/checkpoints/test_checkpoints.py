"""Notebook-side checkpoints: CheckpointStore, options and their errors, magic, CLI, S3."""

from __future__ import annotations

import os
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import cli
from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.kubernetes import manifests as mf
from jupyter_disttrain.backends.kubernetes.option_parsing import parse_options
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.jobs import preflight, resume_cell
from jupyter_disttrain.checkpoints.store import (
    CheckpointStore,
    CorruptCheckpoint,
    format_table,
)
from jupyter_disttrain.job import Job
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.runtime.checkpoint import api as ck
from jupyter_disttrain.runtime.checkpoint import format as fmt
from jupyter_disttrain.runtime.checkpoint.directory import CheckpointDir
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.conftest import submit_now


def save_steps(directory: Path | str, steps: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Save small model checkpoints as a job's rank 0 would."""
    monkeypatch.setenv("DISTRAIN_CHECKPOINT_DIR", str(directory))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    for step in steps:
        torch.manual_seed(step)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
        state = {"model": model.state_dict(), "step": step, "lr": 0.1}
        metrics = {"loss": 1.0 / (step + 1), "accuracy": (step % 7) / 10}
        ck.save_checkpoint(state, step, metrics)


@pytest.fixture
def filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "run"
    save_steps(directory, [10, 20, 30, 40], monkeypatch)
    return directory


def test_list_info_describe_load_best(filled: Path) -> None:
    store = CheckpointStore(str(filled))
    infos = store.list()
    assert [c.step for c in infos] == [10, 20, 30, 40] and all(c.ok for c in infos)
    c = infos[-1]
    assert c.world_size == 4 and c.metrics["loss"] == pytest.approx(1 / 41)
    assert c.uri.startswith(str(filled)) and c.bytes == Path(c.uri).stat().st_size
    assert c.tensors == 4 and c.parameters == 6 * 5 + 5 + 5 * 2 + 2
    assert store.latest() == c and store.info("latest") == c
    assert store.best("accuracy", mode="max").step == 20  # type: ignore[union-attr]
    details = store.describe(40)
    assert details.keys == ["model", "step", "lr"] and details.parameters == 47
    assert [(t.name, t.shape, t.dtype) for t in details.tensors][:2] == [
        ("model.0.weight", (5, 6), "float32"),
        ("model.0.bias", (5,), "float32"),
    ]
    assert details.others == {"step": "40", "lr": "0.1"}
    state = store.load(20)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model.load_state_dict(state["model"])
    assert state["step"] == 20
    text = format_table(infos)
    assert text.splitlines()[0].split() == ["step", "time", "size", "world", "status", "metrics"]
    assert "loss=0.02439" in text and text.count(" ok ") == 4


def test_damaged_checkpoints_are_reported_and_never_loaded(filled: Path) -> None:
    store = CheckpointStore(str(filled))
    infos = {c.step: c for c in store.list()}
    Path(infos[10].uri).unlink()  # a missing file
    data = bytearray(Path(infos[40].uri).read_bytes())  # a flipped byte, same size
    data[100] ^= 1
    Path(infos[40].uri).write_bytes(bytes(data))
    Path(infos[30].uri).write_bytes(b"short")  # truncated
    listed = {c.step: c for c in store.list()}
    assert listed[10].status == "incomplete" and "missing" in listed[10].reason
    assert listed[30].status == "corrupt" and "bytes" in listed[30].reason
    assert listed[40].status == "ok"  # same size: only the checksum can tell
    with pytest.raises(CorruptCheckpoint, match="sha256"):
        store.load(40)
    assert store.info(40).status == "corrupt"  # remembered once seen
    assert store.verify() == {10: "incomplete", 20: "ok", 30: "corrupt", 40: "corrupt"}
    with pytest.raises(CorruptCheckpoint, match="incomplete"):
        store.load(10)
    assert store.load("latest")["step"] == 20  # the newest complete one
    assert store.latest().step == 20  # type: ignore[union-attr]
    assert cli.main(["checkpoints", str(filled), "--verify"]) == 1


def test_stale_latest_falls_back_with_a_warning(filled: Path) -> None:
    store = CheckpointStore(str(filled))
    newest = Path(store.list()[-1].uri)
    data = bytearray(newest.read_bytes())
    data[-30] ^= 1
    newest.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="skipping damaged checkpoint"):
        assert store.load("latest")["step"] == 30


def test_delete_and_prune(filled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(str(filled))
    gone = store.delete(20)
    assert gone.step == 20 and not Path(gone.uri).exists() and store.steps() == [10, 30, 40]
    with pytest.raises(ck.CheckpointError, match="no checkpoint 20"):
        store.delete(20)
    save_steps(filled, [50, 60], monkeypatch)
    (filled / ".tmp-dead-step-000000070-aaaaaa.pt").write_bytes(b"half")  # a crashed writer's
    os.utime(filled / ".tmp-dead-step-000000070-aaaaaa.pt", (0, 0))
    removed = store.prune(keep_last=2, keep_best="accuracy:max")
    assert [c.step for c in removed] == [10, 30] and store.steps() == [40, 50, 60]  # 40: best
    assert not list(filled.glob(".tmp-*"))
    assert sorted(p.name for p in filled.iterdir() if p.suffix == ".pt") == sorted(
        Path(c.uri).name for c in store.list()
    )


def test_a_list_of_ten_thousand_from_the_manifest_has_every_one_in_order(tmp_path: Path) -> None:
    """How fast it is is measured in ``bench/checkpoints.py`` (BENCHMARKS.md "Checkpoints"),
    not asserted here: a time limit in a test fails on a loaded machine, not on a slow list."""
    directory = tmp_path / "many"
    (directory / fmt.ENTRIES_DIR).mkdir(parents=True)
    records = {}
    for step in range(10_000):
        token = secrets.token_hex(3)
        entry = fmt.make_entry(
            step=step,
            token=token,
            layout=fmt.FULL,
            time=1.7e9 + step,
            nbytes=8,
            sha256="0" * 64,
            metrics={"loss": 1 / (step + 1)},
            world_size=8,
            versions={"torch": "x"},
        )
        (directory / entry["path"]).write_bytes(b"12345678")
        name = fmt.entry_name(step, token)
        (directory / fmt.ENTRIES_DIR / name).write_bytes(fmt.encode_entry(entry))
        records[name] = entry
    CheckpointDir(str(directory)).compact(records)
    infos = CheckpointStore(str(directory)).list()
    assert [c.step for c in infos] == list(range(10_000)), [c.step for c in infos][:5]
    assert all(c.ok for c in infos) and infos[-1].metrics == {"loss": 1 / 10_000}


# -- options, magic, CLI, jobs ------------------------------------------------------------


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.extension_manager.load_extension("jupyter_disttrain")
    yield ip


def test_bad_checkpoint_options_are_usage_errors(
    shell: InteractiveShell, filled: Path, tmp_path: Path
) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("x")
    bad = [
        ("--resume latest", "--resume latest needs --checkpoint-dir"),
        ("--resume 7", "needs --checkpoint-dir"),
        ("--resume soon --checkpoint-dir /tmp/x", "is not 'latest', a step number"),
        (f"--checkpoint-dir {filled} --resume 7", r"no checkpoint 7 .*last steps: 10, 20, 30, 40"),
        (f"--checkpoint-dir {tmp_path / 'empty'} --resume latest", "no complete checkpoint"),
        (f"--checkpoint-dir {afile}/ckpt", "is not writable"),
        ("--checkpoint-dir gs://bucket/run", "needs fsspec and gcsfs.*pip install fsspec gcsfs"),
        ("--checkpoint-dir zzz://bucket/run", "unknown protocol zzz://"),
        (f"--resume {tmp_path}/nothing-here/step-000000001-abcdef.pt", "--resume"),
    ]
    for line, needle in bad:
        with pytest.raises(UsageError, match=needle):
            shell.run_cell_magic("distrain", f"--dry-run {line}", "1")


def test_dry_run_passes_checkpoint_env_to_every_node(
    shell: InteractiveShell, filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic(
        "distrain",
        f"--dry-run --nodes 2 --max-restarts 2 --checkpoint-dir {filled} --resume 30",
        "1",
    )
    plan = capsys.readouterr().out
    assert plan.count(f"DISTRAIN_CHECKPOINT_DIR={filled}") == 2
    assert plan.count("DISTRAIN_RESUME=30") == 2
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in plan  # restarts get a fresh store
    uri = CheckpointStore(str(filled)).info(20).uri
    spec = preflight(JobSpec("p", checkpoint_dir=str(filled), resume=str(filled)))
    assert spec.resume == CheckpointStore(str(filled)).info(40).uri  # a directory: its latest
    assert preflight(JobSpec("p", resume=uri)).resume == uri
    with pytest.raises(SpecError, match="a step must be 0 or more"):
        JobSpec("p", checkpoint_dir="/x").with_(resume="-3")


def test_checkpoints_magic_and_cli_list_a_directory(
    shell: InteractiveShell, filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("distrain_checkpoints", str(filled))
    out = capsys.readouterr().out
    assert f"{filled}: 4 checkpoint(s)" in out and "loss=0.03226" in out
    with pytest.raises(UsageError, match="neither a job of this kernel"):
        shell.run_line_magic("distrain_checkpoints", "no-such-job")
    assert cli.main(["checkpoints", str(filled)]) == 0
    assert "step" in capsys.readouterr().out
    assert cli.main(["checkpoints", str(filled), "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in rows] == [10, 20, 30, 40] and rows[0]["status"] == "ok"
    assert (rows[0]["layout"], rows[0]["kind"]) == ("full", "full")  # and its former name
    assert cli.main(["checkpoints", "gs://b/x"]) == 2
    assert "gcsfs" in capsys.readouterr().err


def test_job_checkpoints_and_resume_cell(filled: Path) -> None:
    job = Job(
        JobSpec("with-dir", nodes=2, nproc=3, max_restarts=1, checkpoint_dir=str(filled)),
        LocalBackend(),
    )
    assert job.checkpoints().steps() == [10, 20, 30, 40]
    plain = Job(JobSpec("no-dir"), LocalBackend())
    assert plain.checkpoints().uri.endswith("jobs/no-dir/checkpoints")
    uri = str(filled / "step-000000010-aaaaaa.pt")
    plain.monitor.feed(ev.Event("checkpoint", 0, 1.0, {"step": 10, "uri": uri, "bytes": 5}))
    assert plain.checkpoints().uri == str(filled)  # where the job reported saving
    text = resume_cell(str(filled), 30, job)
    assert text.startswith(
        f"%%distrain --nodes 2 --nproc 3 --max-restarts 1 --checkpoint-dir {filled} --resume 30\n"
    )
    assert "load_checkpoint()" in text


def test_kubernetes_paths_must_be_on_a_volume() -> None:
    versions = {"python": "3.11.7", "torch": "2.13.0"}
    opts = parse_options((("volume", "ckpt:/checkpoints"),))
    spec = JobSpec(
        "k", nodes=2, backend="kubernetes", checkpoint_dir="/checkpoints/run1", resume="latest"
    )
    job = mf.pytorchjob(spec, opts, ["payload.pkl"], versions)
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["DISTRAIN_CHECKPOINT_DIR"] == "/checkpoints/run1"
    assert env["DISTRAIN_RESUME"] == "latest" and env["DISTRAIN_JOB_ID"] == "k"
    mf.check(spec, opts)
    with pytest.raises(SpecError, match=r"no --volume is mounted there.*--volume CLAIM:/data"):
        mf.check(spec.with_(checkpoint_dir="/data/run"), parse_options(()))
    with pytest.raises(SpecError, match="must be absolute"):
        mf.check(spec.with_(checkpoint_dir="runs/1"), opts)
    with pytest.raises(SpecError, match="read-only"):
        mf.check(spec, parse_options((("volume", "ckpt:/checkpoints:ro"),)))
    mf.check(spec.with_(checkpoint_dir="s3://bucket/run"), parse_options(()))  # URLs are fine
    elastic = parse_options((("elastic", "1:2"),))
    body = mf.pytorchjob(
        spec.with_(checkpoint_dir="s3://b/r", max_restarts=2), elastic, ["payload.pkl"], versions
    )["spec"]
    worker = body["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in worker["env"]


# -- S3 against a real S3-compatible server on 127.0.0.1 (tests/s3_server.py) --------------


def test_s3_save_list_load_delete(s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    uri = "s3://ckpt-bucket/unit"
    save_steps(uri, [1, 2, 3], monkeypatch)
    sharded = ck.save_checkpoint({"w": torch.arange(6.0)}, 4, {"loss": 0.1}, sharded=True)
    assert sharded == "s3://ckpt-bucket/unit/step-000000004-" + sharded.rsplit("-", 1)[1]
    store = CheckpointStore(uri)
    assert store.steps() == [1, 2, 3, 4] and all(c.ok for c in store.list())
    assert store.load(2)["step"] == 2 and store.describe(1).parameters == 47
    assert torch.equal(store.load(4)["w"], torch.arange(6.0))
    assert store.verify() == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert ck.load_checkpoint("latest")["w"].sum() == 15.0
    import s3fs

    fs = s3fs.S3FileSystem()
    path = store.info(3).uri.removeprefix("s3://")
    data = bytearray(fs.cat_file(path))
    data[50] ^= 1
    fs.pipe_file(path, bytes(data))
    with pytest.raises(CorruptCheckpoint, match="sha256"):
        store.load(3)
    store.delete(3)
    store.prune(keep_last=1)
    assert store.steps() == [4]
    assert not [p for p in fs.ls("ckpt-bucket/unit") if "step-000000001" in p]


S3_CELL = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    state = load_checkpoint()
    start = 0 if state is None else state["step"] + 1
    for step in range(start, start + 3):
        save_checkpoint({"step": step, "w": torch.full((2,), float(step))}, step,
                        {"loss": 1.0 / (step + 1)}, keep_last=2)
    shards = SHARDS  # every rank writes into another directory, by URL
    save_checkpoint({"w": torch.full((3,), float(start))}, start, sharded=True, uri=shards)
    back = {"w": torch.zeros(3)}
    load_checkpoint(shards, into=back)  # a directory URL: its latest
    (start, back["w"].tolist())
    """
)


@pytest.mark.slow
def test_a_job_checkpoints_to_s3_and_resumes_from_it(s3: dict[str, str]) -> None:
    uri, shards = "s3://ckpt-bucket/job", "s3://ckpt-bucket/job-shards"
    env = tuple((k, v) for k, v in s3.items() if k.startswith(("FSSPEC_", "AWS_")))
    results = []
    for name, resume in (("s3-first", None), ("s3-second", "latest")):
        spec = JobSpec(
            name, nodes=1, nproc=2, timeout=120, env=env, checkpoint_dir=uri, resume=resume
        )
        events: list[ev.Event] = []
        sink = events.append  # list.append is atomic

        payload = build_payload(S3_CELL, {"SHARDS": shards}, job=name)
        run = submit_now(LocalBackend(), preflight(spec), payload, sink)
        assert run.join(120)
        final = [e for e in events if e.kind == "job"][-1]
        assert final.get("state") == "Succeeded", [e.fields for e in events if e.kind == "error"]
        results.append(decode_result(next(e for e in events if e.kind == "result").fields))
    assert results == [(0, [0.0] * 3), (3, [3.0] * 3)]  # the second job went on from step 2
    store = CheckpointStore(uri)
    assert [(c.step, c.kind) for c in store.list()] == [(4, "full"), (5, "full")]
    sharded = CheckpointStore(shards).list()
    assert [(c.step, c.kind) for c in sharded] == [(0, "sharded"), (3, "sharded")]
