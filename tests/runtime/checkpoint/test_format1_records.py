"""Records of format 1, which named a checkpoint's layout ``kind``: listed, loaded, resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.runtime.checkpoint import api as ck
from jupyter_disttrain.runtime.checkpoint import format as fmt
from jupyter_disttrain.runtime.checkpoint import library
from jupyter_disttrain.runtime.checkpoint.directory import CheckpointDir


def to_format1(directory: Path) -> None:
    """Rewrite every record under ``entries/`` as format 1 wrote it (``kind``, no ``layout``),
    then cache them in the manifest as format 1 did."""
    for path in (directory / fmt.ENTRIES_DIR).glob("*.json"):
        record = json.loads(path.read_text())
        record["format"], record["kind"] = 1, record.pop("layout")
        path.write_text(json.dumps(record))
    (directory / fmt.MANIFEST).unlink(missing_ok=True)


def format1_manifest(directory: Path) -> None:
    """Cache the directory's (format 1) records in its manifest, and check they are old."""
    CheckpointDir(str(directory)).compact()
    cached = json.loads((directory / fmt.MANIFEST).read_text())["entries"]
    assert cached and all("kind" in e and "layout" not in e for e in cached.values())


def test_a_record_names_its_layout_layout() -> None:
    entry = fmt.make_entry(
        step=1, token="abcdef", layout=fmt.SHARDED, time=1.0, nbytes=1, sha256=""
    )
    # a reader of format 1 (an earlier version) still finds the layout under its former key
    assert (entry["format"], entry["layout"], entry["kind"]) == (
        fmt.FORMAT,
        fmt.SHARDED,
        fmt.SHARDED,
    )
    assert fmt.layout_of(entry) == fmt.SHARDED
    assert fmt.layout_of({"kind": fmt.TF}) == fmt.TF  # a record of format 1
    assert fmt.layout_of({"layout": fmt.JAX, "kind": fmt.TF}) == fmt.JAX
    assert fmt.layout_of({}) == "" and fmt.layout_of({"kind": None}) == ""
    assert fmt.is_folder({"kind": fmt.SHARDED}) and not fmt.is_folder({"kind": fmt.FULL})


@pytest.mark.parametrize("cached", [False, True], ids=["records", "manifest"])
def test_format1_records_list_load_and_resume(
    ckenv: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    full = {"w": torch.ones(2), "step": 10}
    sharded = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 20}
    ck.save_checkpoint(full, 10, {"loss": 0.5})
    ck.save_checkpoint(sharded, 20, {"loss": 0.25}, sharded=True)
    to_format1(ckenv)
    if cached:
        format1_manifest(ckenv)
    store = CheckpointStore(str(ckenv))
    infos = store.list()
    assert [(c.step, c.layout, c.status) for c in infos] == [
        (10, "full", "ok"),
        (20, "sharded", "ok"),
    ]
    assert [c.kind for c in infos] == ["full", "sharded"]  # the former name
    assert torch.equal(store.load(20)["model"]["w"], sharded["model"]["w"])
    assert torch.equal(store.load(10)["w"], full["w"])
    assert [t.name for t in store.describe(20).tensors] == ["model.w"]
    into = {"model": {"w": torch.zeros(2, 3)}, "step": 0}
    assert ck.load_checkpoint(20, into=into) is into  # in place, as sharded checkpoints load
    assert torch.equal(into["model"]["w"], sharded["model"]["w"])
    monkeypatch.setenv("DISTRAIN_RESUME", "latest")
    assert torch.equal(ck.load_checkpoint()["model"]["w"], sharded["model"]["w"])
    ck.save_checkpoint({"w": torch.zeros(2)}, 30)  # a new record beside the old ones
    assert [c.layout for c in store.list()] == ["full", "sharded", "full"]


def test_a_format1_library_checkpoint_is_handed_back(
    ckenv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "out" / "checkpoint-10"
    source.mkdir(parents=True)
    (source / "trainer_state.json").write_text('{"global_step": 10}')
    assert library.record(str(source), 10, fmt.HF, {"loss": 0.5}) is not None
    to_format1(ckenv)
    store = CheckpointStore(str(ckenv))
    assert [(c.step, c.layout) for c in store.list()] == [(10, "hf")]
    assert store.verify() == {10: "ok"}
    with pytest.raises(fmt.CheckpointError, match="Hugging Face Trainer folder"):
        store.load(10)
    monkeypatch.setenv("DISTRAIN_RESUME", "latest")
    path = Path(str(library.resume_path(fmt.HF)))
    assert (path / "trainer_state.json").read_text() == '{"global_step": 10}'
    assert library.resume_path(fmt.LIGHTNING) is None
