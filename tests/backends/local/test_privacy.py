"""What a local job writes is the owner's only; a directory it did not create keeps its mode."""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService

pytestmark = pytest.mark.slow

CELL = """
import torch, torch.distributed as dist
state = {"w": torch.ones(3) * dist.get_rank()}
for step in range(3):
    report(step=step, loss=1.0 / (step + 1))
save_checkpoint(state, 1, {"loss": 0.5})
save_checkpoint(state, 2, sharded=True)
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return parser.parse_args(list(argv))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def loose(root: Path) -> dict[str, str]:
    """Everything under ``root`` that others may read: directories not 0700, files not 0600."""
    out = {}
    for path in [root, *root.rglob("*")]:
        want = 0o700 if path.is_dir() else 0o600
        if mode(path) != want:
            out[str(path)] = oct(mode(path))
    return out


@pytest.fixture
def umask() -> Iterator[None]:
    """The usual umask (022): what the product does not make private is readable by all."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_shared_home_keeps_its_mode_and_what_the_job_creates_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: None
) -> None:
    home = tmp_path / "shared-home"  # as a /tmp directory several users share
    home.mkdir()
    home.chmod(0o1777)
    monkeypatch.setenv("DISTRAIN_HOME", str(home))
    outside = tmp_path / "outside"  # the user's own folder, made by the user: keeps 0755
    outside.mkdir()
    outside.chmod(0o755)
    ckpt, tb = outside / "runs" / "ckpt", outside / "tb"
    service = JobService(launch_mode="exec")
    spec = service.spec(
        parse(
            "--nodes",
            "1",
            "--nproc",
            "2",
            "--name",
            "private-files",
            "--checkpoint-dir",
            str(ckpt),
            "--tensorboard",
            str(tb),
        )
    )
    job = service.run(service.plan(spec, CELL))
    try:
        assert job.wait(240) == "Succeeded", job.logs()
    finally:
        job.stop()
    assert mode(home) == 0o1777
    assert mode(outside) == 0o755
    assert loose(home / "jobs") == {}
    assert {p.name for p in (home / "jobs" / "private-files").iterdir()} >= {
        "payload.pkl",
        "state.json",
        "logs",
    }
    assert [c.step for c in job.checkpoints().list()] == [1, 2]
    assert loose(outside / "runs") == {}  # the checkpoint folder and its parent were made here
    assert len([p for p in ckpt.rglob("*") if p.is_file()]) >= 5  # records, full, shards
    assert sorted(p.name for p in tb.rglob("*") if p.is_dir()) == [
        "private-files",
        "rank-0",
        "rank-1",
    ]
    assert loose(tb) == {}


def test_an_existing_checkpoint_directory_keeps_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: None
) -> None:
    """The user's own (group-shared) folder stays as it is; what is saved in it is private."""
    from jupyter_disttrain.runtime.checkpoint.api import save_checkpoint

    ckpt = tmp_path / "team"
    ckpt.mkdir()
    ckpt.chmod(0o2775)
    monkeypatch.setenv("DISTRAIN_CHECKPOINT_DIR", str(ckpt))
    monkeypatch.setenv("RANK", "0")
    import torch

    save_checkpoint({"w": torch.ones(2)}, 3)
    save_checkpoint({"w": torch.ones(2)}, 4, sharded=True)
    assert mode(ckpt) == 0o2775
    inside = list(ckpt.rglob("*"))
    assert len(inside) >= 6, inside
    assert {k: v for k, v in loose(ckpt).items() if k != str(ckpt)} == {}
