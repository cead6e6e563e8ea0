"""A checkpoint save on a full disk: one clear error, the earlier checkpoints intact.

The disk is a real one that fills: a small tmpfs, mounted for the test (as root;
skipped with the reason where mounting is not permitted).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.runtime.checkpoint import api as checkpoint
from jupyter_disttrain.runtime.checkpoint.format import CheckpointError

SIZE = 2 << 20  # bytes of the small disk
BIG = 1 << 20  # float32 elements: 4 MiB, more than the disk holds


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs at ``tmp_path/disk``."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def job_dir(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rank 0 of a job whose checkpoint directory is on the small disk."""
    path = small_disk / "ckpt"
    monkeypatch.setenv("DISTRAIN_CHECKPOINT_DIR", str(path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(checkpoint, "_dirs", {})
    return path


MESSAGE = re.compile(
    r"^checkpoint step 7 not saved: no space left on device in (?P<dir>\S+) "
    r"\((?P<free>[\d.]+) MB free\); earlier checkpoints are intact$"
)


def assert_only_step_1(path: Path) -> None:
    """The directory lists step 1 alone, verified, and holds no temporary leftover."""
    store = CheckpointStore(str(path))
    listed = store.list()
    assert [c.step for c in listed] == [1], listed
    assert store.verify() == {1: "ok"}
    assert torch.equal(store.load(1)["w"], torch.arange(4.0))
    leftovers = [p for p in path.rglob("*") if p.name.startswith(".tmp")]
    assert not leftovers, leftovers


@pytest.mark.parametrize("how", ["full", "sharded", "background"])
def test_a_full_disk_says_so_and_keeps_the_earlier_checkpoints(job_dir: Path, how: str) -> None:
    sharded = how == "sharded"
    checkpoint.save_checkpoint({"w": torch.arange(4.0)}, 1, sharded=sharded)
    free_before = shutil.disk_usage(job_dir).free
    with pytest.raises(CheckpointError) as caught:
        checkpoint.save_checkpoint(
            {"w": torch.ones(BIG)}, 7, sharded=sharded, background=how == "background"
        )
        checkpoint.wait_for_saves()
    text = str(caught.value).removeprefix("a background save failed: ")
    found = MESSAGE.match(text)
    assert found, text
    assert found["dir"] == str(job_dir)
    assert 0.0 < float(found["free"]) <= round(SIZE / 1e6, 1)  # what the message says is free
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert_only_step_1(job_dir)
    assert shutil.disk_usage(job_dir).free >= free_before - 64 * 1024  # its space given back
    checkpoint.save_checkpoint({"w": torch.arange(4.0) * 2}, 8, sharded=sharded)  # room again
    assert [c.step for c in CheckpointStore(str(job_dir)).list()] == [1, 8]


CELL = textwrap.dedent(
    """
    import torch
    save_checkpoint({"w": torch.arange(4.0)}, 1)
    save_checkpoint({"w": torch.ones(BIG)}, 7)
    """
)


@pytest.mark.slow
def test_a_job_whose_disk_fills_fails_with_that_sentence(small_disk: Path) -> None:
    from jupyter_disttrain.backends.local import LocalBackend
    from jupyter_disttrain.spec import JobSpec
    from tests.backends.local.test_backend import run_job

    path = small_disk / "job-ckpt"
    spec = JobSpec("full-disk", nodes=1, nproc=2, timeout=120, checkpoint_dir=str(path))
    sink, _ = run_job(spec, CELL, {"BIG": BIG}, backend=LocalBackend(mode="exec"), timeout=150)
    final = sink.final()
    assert final.get("state") == "Failed", final.fields
    message = str(final.get("message"))
    assert message.startswith(
        f"rank 0: CheckpointError: checkpoint step 7 not saved: no space left on device in {path} ("
    ), message
    assert message.endswith("MB free); earlier checkpoints are intact"), message
    errors = sink.kinds("error")
    assert "inline_container" not in str(errors[0].get("traceback")), errors[0].fields
    assert_only_step_1(path)
    names = sorted(os.listdir(path))
    assert len(names) == 2 and names[0] == ".distrain" and names[1].startswith("step-000000001-")
