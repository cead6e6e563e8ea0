"""What every checkpoint writer shares (torch and TensorFlow): environment, commit, report.

Standard library only (plus the checkpoint format and directory modules).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TypedDict

from .. import preemption, versions
from .. import report as _report
from ..env import ENV_JOB_ID, ENV_RUN_ID
from . import format as fmt
from .directory import CheckpointDir
from .format import CheckpointError

ENV_FSYNC = "DISTRAIN_CHECKPOINT_FSYNC"

_prepared: set[str] = set()


def env_text(name: str) -> str:
    return os.environ.get(name, "").strip()


def env_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def library_versions(packages: Iterable[str] = ()) -> dict[str, str]:
    """Versions a checkpoint records: the worker's reported ones, ``packages`` (the format's
    own) and numpy's."""
    return versions.reported([*packages, "numpy"])


def fsync_enabled() -> bool:
    return env_text(ENV_FSYNC) not in ("0", "false", "no")


def prepare_dir(cdir: CheckpointDir) -> None:
    if cdir.uri not in _prepared:
        try:
            cdir.prepare()
        except OSError as exc:
            raise CheckpointError(f"cannot create checkpoint directory {cdir.uri}: {exc}") from exc
        _prepared.add(cdir.uri)


def finish_commit(
    cdir: CheckpointDir,
    entry: fmt.Entry,
    keep_last: int | None,
    keep_best: str | None,
) -> str:
    """Record ``entry``, apply retention, tell the notebook; return the checkpoint's URI."""
    committed = cdir.commit(entry)
    if keep_last is not None:
        cdir.prune(keep_last, keep_best, protect=[committed["entry"]])
    uri = cdir.payload_uri(entry)
    _report.emit(
        "checkpoint", step=entry["step"], uri=uri, bytes=entry["bytes"], metrics=entry["metrics"]
    )
    preemption.checkpoint_saved(int(entry["step"]))  # exits if a SIGTERM asked for this one
    return uri


def folder_entry(
    *,
    step: int,
    token: str,
    layout: str,
    files: Mapping[str, tuple[int, str]],
    metrics: Mapping[str, float],
    tensors: int,
    parameters: int,
    packages: Iterable[str] = (),
) -> fmt.Entry:
    """The record of a checkpoint folder written now by this job: its ``files`` (size and
    sha256 by relative path) make its size and its one digest; the job, run, world size and
    library versions (:func:`library_versions` of ``packages``) come from the worker."""
    combined = hashlib.sha256("".join(f"{n}:{h}\n" for n, (_, h) in sorted(files.items())).encode())
    return fmt.make_entry(
        step=step,
        token=token,
        layout=layout,
        time=time.time(),
        nbytes=sum(n for n, _ in files.values()),
        sha256=combined.hexdigest(),
        metrics=metrics,
        versions=library_versions(packages),
        files=files,
        **worker_origin(),
        tensors=tensors,
        parameters=parameters,
    )


class WorkerOrigin(TypedDict):
    """Which job wrote a checkpoint, as the worker writing it knows it."""

    world_size: int
    job: str
    run: str


def job_and_run() -> tuple[str, str]:
    """This worker's job and run (empty outside a job)."""
    return env_text(ENV_JOB_ID), env_text(ENV_RUN_ID)


def worker_origin() -> WorkerOrigin:
    """This worker's world size, job and run (``1``, ``""``, ``""`` outside a job)."""
    job, run = job_and_run()
    return WorkerOrigin(world_size=int(os.environ.get("WORLD_SIZE", "1")), job=job, run=run)


#: A full disk, and a full quota: what a save cannot get past by being retried.
_NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def _no_space(exc: BaseException) -> OSError | None:
    """The "no space" error behind ``exc``, if any (torch chains it under its own).

    Followed: ``__cause__``/``__context__`` and the per-rank failures of
    ``torch.distributed.checkpoint``'s ``CheckpointException``.
    """
    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno in _NO_SPACE:
            return item
        todo.extend(e for e in (item.__cause__, item.__context__) if e is not None)
        failures = getattr(item, "failures", None)
        if isinstance(failures, dict):
            pairs = [f for f in failures.values() if isinstance(f, tuple) and f]
            todo.extend(f[0] for f in pairs if isinstance(f[0], BaseException))
    return None


def no_space_message(cdir: CheckpointDir, step: int, error: OSError) -> str:
    """``checkpoint step 7 not saved: no space left on device in DIR (3.1 MB free); ...``."""
    free = ""
    if cdir.local:
        with contextlib.suppress(OSError):
            free = f" ({shutil.disk_usage(cdir.root).free / 1e6:.1f} MB free)"
    what = _NO_SPACE.get(error.errno or 0, error.strerror or str(error))
    return (
        f"checkpoint step {step} not saved: {what} in {cdir.uri}{free}; earlier checkpoints "
        "are intact"
    )


@contextlib.contextmanager
def saving(cdir: CheckpointDir, step: int) -> Iterator[None]:
    """Around one save of ``step``: a full disk becomes one :class:`CheckpointError` saying so.

    The writers leave nothing behind on failure (temporary names removed, no
    record written), so the earlier checkpoints are what the directory lists.
    """
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        full = _no_space(exc)
        if full is None:
            raise
        raise CheckpointError(no_space_message(cdir, step, full)) from None
