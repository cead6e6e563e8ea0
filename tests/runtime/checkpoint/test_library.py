"""A library's own checkpoints copied into the job's directory: listed, verified, handed back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.runtime.checkpoint import format as fmt
from jupyter_disttrain.runtime.checkpoint import library


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ckpts"
    monkeypatch.setenv("DISTRAIN_CHECKPOINT_DIR", str(folder))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("DISTRAIN_RESUME", raising=False)
    monkeypatch.delenv("DISTRAIN_JOB_ID", raising=False)
    return folder


def test_a_trainer_folder_is_copied_listed_and_handed_back(
    job_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "out" / "checkpoint-10"
    (source / "nested").mkdir(parents=True)
    (source / "trainer_state.json").write_text('{"global_step": 10}')
    (source / "nested" / "rng_state_1.pth").write_bytes(b"\x00" * 100)
    uri = library.record(str(source), 10, fmt.HF, {"loss": 0.5})
    assert uri is not None and uri.endswith(".hf")
    assert '"kind":"checkpoint"' in capsys.readouterr().out
    (source / "trainer_state.json").write_text("rewritten by the library")  # the copy stays
    store = CheckpointStore(str(job_dir))
    [info] = store.list()
    assert (info.step, info.layout, info.metrics) == (10, "hf", {"loss": 0.5})
    assert store.verify() == {10: "ok"} and info.record["source"] == "checkpoint-10"
    with pytest.raises(fmt.CheckpointError, match=r"Hugging Face Trainer folder .*--resume 10"):
        store.load(10)
    assert library.resume_path(fmt.HF) is None  # no --resume, no restart
    monkeypatch.setenv("DISTRAIN_RESUME", "latest")
    path = Path(str(library.resume_path(fmt.HF)))
    assert (path / "trainer_state.json").read_text() == '{"global_step": 10}'
    assert (path / "nested" / "rng_state_1.pth").stat().st_size == 100
    assert library.resume_path(fmt.LIGHTNING) is None  # another library's: not handed over
    found = library.resume_checkpoint(fmt.HF)  # with its record: what the library wrote
    assert found is not None and found[0] == str(path)
    assert (found[1]["source"], found[1]["step"], found[1]["metrics"]) == (
        "checkpoint-10",
        10,
        {"loss": 0.5},
    )
    (path / "nested" / "rng_state_1.pth").write_bytes(b"\x01")
    assert store.verify() == {10: "corrupt"}
    with pytest.raises(fmt.CorruptCheckpoint, match="checksum mismatch"):
        library.resume_path(fmt.HF)


def test_a_lightning_file_loads_as_the_torch_state_it_is(job_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "epoch=0-step=4.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "global_step": 4}, source)
    assert library.record(str(source), 4, fmt.LIGHTNING, {}) is not None
    assert library.record(str(tmp_path / "gone.ckpt"), 5, fmt.LIGHTNING, {}) is None
    store = CheckpointStore(str(job_dir))
    assert [(i.step, i.layout) for i in store.list()] == [(4, "lightning")]
    assert store.load(4)["state_dict"]["w"].tolist() == [1.0, 1.0]


def test_without_a_checkpoint_directory_nothing_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTRAIN_CHECKPOINT_DIR", raising=False)
    source = tmp_path / "model.weights.h5"
    source.write_bytes(b"h5")
    assert not library.enabled() and library.record(str(source), 1, fmt.KERAS, {}) is None
