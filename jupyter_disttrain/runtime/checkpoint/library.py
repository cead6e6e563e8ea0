"""A training library's own checkpoints in the job's checkpoint directory (autolog).

Hugging Face ``checkpoint-N`` folders, Lightning ``.ckpt`` files and Keras
checkpoints are written by their library wherever it likes. Once the library
has finished writing one, the writing rank calls :func:`record`: it copies the
file or folder into the job's checkpoint directory (hashing every byte on the
way), commits it like any other checkpoint (a record after the data, so a
listed checkpoint is complete) and sends the ``checkpoint`` line. A copy,
not a link: libraries rewrite and rotate their own files (``save_total_limit``,
``last.ckpt``), and the copy stays as it was listed. :func:`resume_path` is
the other way: the local path of the checkpoint this run resumes from, for
the library's own ``resume_from_checkpoint=`` / ``ckpt_path=`` (or Keras's
``load_weights``). Standard
library only (fsspec for URLs).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import time
from collections.abc import Mapping

from . import format as fmt
from .api import ENV_DIR, checkpoint_dir, resume_target
from .commit import (
    env_text,
    finish_commit,
    folder_entry,
    fsync_enabled,
    library_versions,
    prepare_dir,
    worker_origin,
)
from .directory import CheckpointDir, HashingWriter

CHUNK = 1 << 20


def enabled() -> bool:
    """Whether this job has a checkpoint directory to record library checkpoints in."""
    return bool(env_text(ENV_DIR))


def record(source: str, step: int, layout: str, metrics: Mapping[str, float]) -> str | None:
    """Copy the finished checkpoint at ``source`` (a file or a folder) in as ``step``, of
    ``layout`` (``hf``, ``lightning``, ``keras`` or a registered format's).

    Call it on one rank, after the library's save returned. Returns the
    checkpoint's URI, or ``None`` when the job has no checkpoint directory or
    ``source`` is gone (a library that removed it at once).
    """
    if not enabled() or not os.path.exists(source):
        return None
    cdir = checkpoint_dir()
    prepare_dir(cdir)
    token = secrets.token_hex(3)
    values = {str(k): float(v) for k, v in metrics.items()}
    if os.path.isdir(source):
        entry = _copy_folder(cdir, source, step, token, layout, values)
    else:
        entry = _copy_file(cdir, source, step, token, layout, values)
    return finish_commit(cdir, entry, None, None)


def _copy_file(
    cdir: CheckpointDir, source: str, step: int, token: str, layout: str, metrics: dict[str, float]
) -> fmt.Entry:
    path = cdir.fs.join(cdir.root, fmt.payload_name(step, token, layout))
    with open(source, "rb") as src, cdir.fs.atomic_write(path, fsync=fsync_enabled()) as fh:
        writer = HashingWriter(fh)
        while chunk := src.read(CHUNK):
            writer.write(chunk)
    entry = fmt.make_entry(
        step=step,
        token=token,
        layout=layout,
        time=time.time(),
        nbytes=writer.bytes,
        sha256=writer.hexdigest(),
        metrics=metrics,
        versions=library_versions(),
        **worker_origin(),
    )
    entry["source"] = os.path.basename(source)
    return entry


def _copy_folder(
    cdir: CheckpointDir, source: str, step: int, token: str, layout: str, metrics: dict[str, float]
) -> fmt.Entry:
    name = fmt.payload_name(step, token, layout)
    tmp = cdir.fs.temp_dir(cdir.root, name)
    files: dict[str, tuple[int, str]] = {}
    try:
        for folder, _dirs, names in os.walk(source):
            for fname in sorted(names):
                full = os.path.join(folder, fname)
                relative = os.path.relpath(full, source).replace(os.sep, "/")
                with open(full, "rb") as fh:
                    data = fh.read()
                target = cdir.fs.join(tmp, relative)
                if "/" in relative:
                    cdir.fs.makedirs(target.rsplit("/", 1)[0])
                cdir.fs.write_bytes(target, data, fsync=False)
                files[relative] = (len(data), hashlib.sha256(data).hexdigest())
        cdir.fs.commit_dir(tmp, cdir.fs.join(cdir.root, name), fsync=fsync_enabled())
    except BaseException:
        cdir.fs.remove(tmp)
        raise
    entry = folder_entry(
        step=step, token=token, layout=layout, files=files, metrics=metrics, tensors=0, parameters=0
    )
    entry["source"] = os.path.basename(source.rstrip(os.sep))
    return entry


def resume_path(layout: str) -> str | None:
    """The local path of the ``layout`` checkpoint this run resumes from, if it has one.

    As ``load_checkpoint()`` decides: after a restart the job's own latest,
    else ``--resume``. A checkpoint of another layout, or none, gives ``None``.
    A checkpoint on an object store is first copied to a local folder.
    """
    found = resume_checkpoint(layout)
    return None if found is None else found[0]


def resume_checkpoint(layout: str) -> tuple[str, fmt.Entry] | None:
    """:func:`resume_path` and the checkpoint's record (its ``source``, step and metrics)."""
    try:
        found = resume_target(checkpoint_dir() if enabled() else None)
    except fmt.CheckpointError:
        return None
    if found is None or fmt.layout_of(found[1]) != layout:
        return None
    cdir, entry = found
    status, reason = cdir.verify(entry)
    if status != fmt.OK:
        raise fmt.CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
    if cdir.local:
        return cdir.payload_path(entry), entry
    return _download(cdir, entry), entry


def _download(cdir: CheckpointDir, entry: fmt.Entry) -> str:
    """A local copy of a checkpoint kept on an object store."""
    folder = tempfile.mkdtemp(prefix="distrain-resume-")
    path = cdir.payload_path(entry)
    if not fmt.is_folder(entry):
        local = os.path.join(folder, str(entry["path"]))
        with open(local, "wb") as fh:
            fh.write(cdir.read_verified(entry))
        return local
    for relative in dict(entry.get("files", {})):
        local = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open(local, "wb") as fh:
            fh.write(cdir.fs.read_bytes(cdir.fs.join(path, relative)) or b"")
    return folder
