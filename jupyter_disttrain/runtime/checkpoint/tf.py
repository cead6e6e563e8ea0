"""TensorFlow checkpoints in the checkpoint directory format (see :mod:`.format`).

``save_checkpoint(state, step)`` with a ``tf.train.Checkpoint``, a Keras model
or any other trackable (wrapped as ``tf.train.Checkpoint(model=state)``) must
run on every worker, as TensorFlow requires under
``MultiWorkerMirroredStrategy`` (saving reads every variable, and some reads
are collectives). The chief (rank 0) writes TensorFlow's files into a
temporary directory beside the final name, then commits it like a sharded
checkpoint (per-file digests, rename, record); the other workers write to a
private temporary directory that is removed at once, and all return once
it is committed (so any worker may load it next). The checkpoint is the
directory ``step-...-ID.tf`` holding ``ckpt.index`` and ``ckpt.data-*``.
``load_checkpoint(into=...)`` restores into a ``tf.train.Checkpoint`` or
model of the same structure on every worker.

Used only when TensorFlow is already imported; nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import format as fmt
from .directory import CheckpointDir
from .format import CheckpointError, CorruptCheckpoint

PREFIX = "ckpt"


def is_tensorflow(state: Any) -> bool:
    """True for a ``tf.train.Checkpoint``, Keras model or other TensorFlow trackable."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return False
    return isinstance(state, tf.__internal__.tracking.Trackable)


def _as_checkpoint(tf: Any, state: Any) -> Any:
    return state if isinstance(state, tf.train.Checkpoint) else tf.train.Checkpoint(model=state)


def save(
    cdir: CheckpointDir,
    state: Any,
    step: int,
    metrics: dict[str, float],
    keep_last: int | None,
    keep_best: str | None,
) -> str | None:
    """Write ``state`` as checkpoint ``step`` (on every worker); the chief returns its URI."""
    from ..tf import barrier
    from . import commit as ck

    tf = sys.modules["tensorflow"]
    ckpt = _as_checkpoint(tf, state)
    if ck.env_rank() != 0:
        with _scratch() as scratch:
            ckpt.write(os.path.join(scratch, PREFIX))
        barrier()  # the chief has committed
        return None
    ck.prepare_dir(cdir)
    token = secrets.token_hex(3)
    name = fmt.payload_name(step, token, fmt.TF)
    tmp = cdir.fs.temp_dir(cdir.root, name)
    try:
        with _scratch(tmp if cdir.local else None) as scratch:
            ckpt.write(os.path.join(scratch, PREFIX))
            files = _digests(scratch)
            shapes = [shape for _, shape in tf.train.list_variables(os.path.join(scratch, PREFIX))]
            if not cdir.local:
                for fname in files:
                    with open(os.path.join(scratch, fname), "rb") as fh:
                        cdir.fs.write_bytes(cdir.fs.join(tmp, fname), fh.read(), ck.fsync_enabled())
        cdir.fs.commit_dir(tmp, cdir.fs.join(cdir.root, name), fsync=ck.fsync_enabled())
    except BaseException:
        cdir.fs.remove(tmp)
        raise
    entry = ck.folder_entry(
        step=step,
        token=token,
        layout=fmt.TF,
        files=files,
        metrics=metrics,
        tensors=len(shapes),
        parameters=sum(_numel(s) for s in shapes),
        packages=("tensorflow",),
    )
    uri = ck.finish_commit(cdir, entry, keep_last, keep_best)
    barrier()
    return uri


def load(cdir: CheckpointDir, entry: fmt.Entry, into: Any) -> Any:
    """Restore checkpoint ``entry`` into ``into`` (checked first) and return ``into``."""
    if into is None or not is_tensorflow(into):
        raise CheckpointError(
            f"checkpoint step {entry['step']} was saved by TensorFlow: restore it into the "
            "objects it was saved from, load_checkpoint(into=tf.train.Checkpoint(...)) or "
            "load_checkpoint(into=model), on every worker"
        )
    tf = sys.modules["tensorflow"]
    with _local_copy(cdir, entry) as folder:
        status = _as_checkpoint(tf, into).read(os.path.join(folder, PREFIX))
        status.assert_existing_objects_matched()
        status.expect_partial()  # e.g. optimizer slots not created yet are restored later
    return into


def variables(cdir: CheckpointDir, entry: fmt.Entry) -> dict[str, Any]:
    """Every saved variable as a numpy array, by its checkpoint key (for the notebook)."""
    tf = _import_tensorflow()
    with _local_copy(cdir, entry) as folder:
        reader = tf.train.load_checkpoint(os.path.join(folder, PREFIX))
        return {
            key: reader.get_tensor(key)
            for key in sorted(reader.get_variable_to_shape_map())
            if key != "_CHECKPOINTABLE_OBJECT_GRAPH"
        }


def describe(cdir: CheckpointDir, entry: fmt.Entry) -> list[tuple[str, tuple[int, ...], str]]:
    """``(key, shape, dtype)`` of every saved variable, from the index file only."""
    tf = _import_tensorflow()
    with _local_copy(cdir, entry) as folder:
        reader = tf.train.load_checkpoint(os.path.join(folder, PREFIX))
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
    return [
        (key, tuple(int(d) for d in shapes[key]), str(dtypes[key].name))
        for key in sorted(shapes)
        if key != "_CHECKPOINTABLE_OBJECT_GRAPH"
    ]


def _import_tensorflow() -> Any:
    try:
        import tensorflow
    except ImportError:
        raise CheckpointError(
            "this checkpoint was saved by TensorFlow; reading it needs TensorFlow: "
            "pip install 'jupyter_disttrain[tensorflow]'"
        ) from None
    return tensorflow


@contextmanager
def _scratch(path: str | None = None) -> Iterator[str]:
    """``path``, or a private temporary directory removed afterwards."""
    if path is not None:
        yield path
        return
    folder = tempfile.mkdtemp(prefix="distrain-tf-ckpt-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _local_copy(cdir: CheckpointDir, entry: fmt.Entry) -> Iterator[str]:
    """The checkpoint's folder on this machine, verified (downloaded first from a URL)."""
    status, reason = cdir.verify(entry)
    if status != fmt.OK:
        raise CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
    folder = cdir.payload_path(entry)
    if cdir.local:
        yield folder
        return
    with _scratch() as scratch:
        for fname in dict(entry.get("files", {})):
            data = cdir.fs.read_bytes(cdir.fs.join(folder, fname)) or b""
            with open(os.path.join(scratch, fname), "wb") as fh:
                fh.write(data)
        yield scratch


def _digests(folder: str) -> dict[str, tuple[int, str]]:
    out = {}
    for fname in sorted(os.listdir(folder)):
        sha = hashlib.sha256()
        size = 0
        with open(os.path.join(folder, fname), "rb") as fh:
            while chunk := fh.read(1 << 20):
                sha.update(chunk)
                size += len(chunk)
        out[fname] = (size, sha.hexdigest())
    return out


def _numel(shape: Any) -> int:
    n = 1
    for dim in shape:
        n *= int(dim)
    return n
