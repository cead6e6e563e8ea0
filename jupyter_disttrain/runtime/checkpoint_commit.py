"""What every checkpoint writer shares (torch and TensorFlow): environment, commit, report.

Standard library only (plus the checkpoint format and directory modules).
"""

from __future__ import annotations

import os
import sys

from . import checkpoint_format as fmt
from . import preemption
from . import report as _report
from .checkpoint_dir import CheckpointDir
from .checkpoint_format import CheckpointError

ENV_FSYNC = "DISTRAIN_CHECKPOINT_FSYNC"

_prepared: set[str] = set()


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _versions() -> dict[str, str]:
    import platform

    out = {"python": platform.python_version()}
    for name in ("torch", "tensorflow", "numpy"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = str(getattr(mod, "__version__", "?"))
    return out


def _fsync() -> bool:
    return _env(ENV_FSYNC) not in ("0", "false", "no")


def _prepare(cdir: CheckpointDir) -> None:
    if cdir.uri not in _prepared:
        try:
            cdir.prepare()
        except OSError as exc:
            raise CheckpointError(f"cannot create checkpoint directory {cdir.uri}: {exc}") from exc
        _prepared.add(cdir.uri)


def _finish_commit(
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


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))
