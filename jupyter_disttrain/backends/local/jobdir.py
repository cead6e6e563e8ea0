"""Where local jobs keep their payload, logs and state, so they outlive a kernel.

Layout under :func:`..home.home` (``$DISTRAIN_HOME``, else
``$XDG_DATA_HOME/jupyter_disttrain``, else ``~/.local/share/jupyter_disttrain``)::

    jobs/<name>/payload.pkl      what the workers run
    jobs/<name>/state.json       written atomically by the job's owner
    jobs/<name>/events.jsonl     backend events (state changes, restarts)
    jobs/<name>/view.json        the job's follower's snapshot, signed (service/recorded.py)
    jobs/<name>/logs/rank-R.log  everything rank R printed (fds 1 and 2)
    jobs/<name>/logs/agent-N.log node agent N (torchrun) output
    jobs/<name>/stop             present once a stop was requested
    jobs/<name>/checkpoints/     where the ranks save unless given --checkpoint-dir
    jobs/<name>.<K>/             run K (2, 3, ...) of the name (see below)
    tensorboard/<name>/rank-R/   every job's metrics as TensorBoard event files (any backend)

Running a name again replaces its latest run's directory, unless that run
saved checkpoints there: then the new run gets ``jobs/<name>.<K>`` and the
earlier run stays where it is, its checkpoints where ``--resume`` and
``CheckpointStore`` found them. A name means its latest run; ``<name>.<K>``
(a dot is never part of a job's name) means run K, ``<name>.1`` being
``jobs/<name>``; listings show earlier runs by those names.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...runtime.checkpoint.format import ENTRIES_DIR, META_DIR
from ...runtime.checkpoint.storage import makedirs_private
from ...runtime.files import replace_file
from ...terminal import physical_lines
from ..home import home

RANK_LOG_RE = re.compile(r"^rank-(\d+)\.log$")
#: Run K of a job name: ``NAME.K``.
RUN_RE = re.compile(r"^(?P<name>[a-z][-a-z0-9]*)\.(?P<run>[1-9][0-9]*)$")


def jobs_root() -> Path:
    """The directory that holds one directory per local job."""
    return home() / "jobs"


def job_dir(name: str) -> Path:
    """The directory of job ``name``'s latest run, or of run K for ``NAME.K`` (may not exist)."""
    match = RUN_RE.match(name)
    if match:
        return _run_path(match["name"], int(match["run"]))
    kept = runs(name)
    return kept[-1][1] if kept else jobs_root() / name


def _run_path(name: str, run: int) -> Path:
    return jobs_root() / (name if run == 1 else f"{name}.{run}")


def split_run(directory_name: str) -> tuple[str, int]:
    """``("mnist", 3)`` for ``mnist.3``; ``("mnist", 1)`` for ``mnist``."""
    match = RUN_RE.match(directory_name)
    return (match["name"], int(match["run"])) if match else (directory_name, 1)


def runs(name: str) -> list[tuple[int, Path]]:
    """The run directories of job ``name`` that exist, as ``(K, directory)``, oldest first."""
    root = jobs_root()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = []
    for entry in names:
        base, run = split_run(entry)
        if base == name and (root / entry).is_dir():
            found.append((run, root / entry))
    return sorted(found)


def holds_checkpoints(directory: Path) -> bool:
    """Whether a run's own checkpoint folder holds a checkpoint or anything else of the user's."""
    folder = directory / "checkpoints"
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    if any(name != META_DIR for name in names):
        return True
    try:
        return bool(os.listdir(folder / ENTRIES_DIR))
    except OSError:
        return False


def next_run_dir(name: str) -> Path:
    """Where a new run of ``name`` goes: its latest run's directory (replaced) when that
    run keeps no checkpoints there, else the next ``NAME.K``."""
    kept = runs(name)
    if not kept:
        return jobs_root() / name
    run, latest = kept[-1]
    return _run_path(name, run + 1) if holds_checkpoints(latest) else latest


def run_names(directories: list[Path]) -> dict[Path, str]:
    """How listings name each run directory: ``NAME`` for a name's latest run, else ``NAME.K``."""
    latest: dict[str, int] = {}
    try:
        names = os.listdir(jobs_root())
    except OSError:
        names = []
    for entry in [*names, *(d.name for d in directories)]:
        base, run = split_run(entry)
        latest[base] = max(run, latest.get(base, 0))
    out = {}
    for directory in directories:
        base, run = split_run(directory.name)
        out[directory] = base if run == latest[base] else f"{base}.{run}"
    return out


def tensorboard_root() -> Path:
    """Where jobs write TensorBoard event files unless given ``--tensorboard DIR``."""
    return home() / "tensorboard"


def logs_dir(directory: Path) -> Path:
    """The per-rank log directory of a job directory."""
    return directory / "logs"


#: Job state is the owner's only: a payload holds the notebook values a cell captured
#: (tokens included) and is unpickled by the workers.
DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each readable by the owner only.

    Directories that exist keep their mode: a shared ``$DISTRAIN_HOME`` (``/tmp/...``) stays
    open to others, while the ``jobs`` folder and each job's directory made in it are private.
    """
    makedirs_private(str(directory))


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file only the owner can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def open_private(path: Path | str, mode: str = "ab") -> Any:
    """Open ``path`` for appending (``a``/``ab``), creating it readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    return os.fdopen(fd, mode)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` so that a reader sees the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True)
    replace_file(path, text.encode(), prefix=".state-", durable=True)


def read_state(directory: Path) -> dict[str, Any] | None:
    """The job's state file, or None when missing or unreadable."""
    try:
        with open(directory / "state.json") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def list_job_dirs() -> list[Path]:
    """Job directories that have a state file, newest first."""
    root = jobs_root()
    if not root.is_dir():
        return []
    dirs = [d for d in root.iterdir() if (d / "state.json").is_file()]
    return sorted(dirs, key=lambda d: (d / "state.json").stat().st_mtime, reverse=True)


def rank_logs(directory: Path) -> dict[int, Path]:
    """Rank -> log file of a job directory."""
    out: dict[int, Path] = {}
    logs = logs_dir(directory)
    if logs.is_dir():
        for path in logs.iterdir():
            match = RANK_LOG_RE.match(path.name)
            if match:
                out[int(match.group(1))] = path
    return dict(sorted(out.items()))


#: Bytes read at a time when a file is read from its end.
TAIL_BLOCK = 64 * 1024
#: Longest line a tail returns, in bytes; a longer one is cut, with a note of how much.
MAX_LINE_BYTES = 16 * 1024
#: Most bytes a tail scans back from the end (lines left out do not make it read on forever).
MAX_SCAN_BYTES = 64 * 1024 * 1024


def tail_lines(path: Path, n: int | None, skip: Callable[[str], bool] | None = None) -> list[str]:
    """The last ``n`` lines of a text file (all when ``n`` is None).

    Lines for which ``skip`` is true (the job's control lines) are left out.
    With ``n`` given the file is read from its end, block by block, and each
    line is cut at :data:`MAX_LINE_BYTES`, and at most :data:`MAX_SCAN_BYTES`
    are scanned: memory and time stay bounded whatever the file's size.
    """
    if n is not None and n <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            if n is None:
                lines = physical_lines(fh.read().decode(errors="replace"))
                return [line for line in lines if skip is None or not skip(line)]
            return _last_lines(fh, n, skip)
    except OSError:
        return []


def _last_lines(fh: Any, n: int, skip: Callable[[str], bool] | None) -> list[str]:
    """The last ``n`` lines of binary file ``fh`` that ``skip`` keeps, read backwards."""
    end = fh.seek(0, os.SEEK_END)
    if not end:
        return []
    if _read_at(fh, end - 1, 1) == b"\n":
        end -= 1  # a final newline ends the last line; it starts none
    out: list[str] = []
    pos = end  # lines end at ``end``; bytes before ``pos`` are not scanned yet
    stop = max(0, end - MAX_SCAN_BYTES) if end else -1  # an empty last line: read once
    while len(out) < n and pos > stop:
        start = max(0, stop, pos - TAIL_BLOCK)
        block = _read_at(fh, start, pos - start)
        cut = len(block)
        while len(out) < n:
            newline = block.rfind(b"\n", 0, cut)
            if newline < 0:
                break
            _add_line(fh, start + newline + 1, end, n, skip, out)
            end = start + newline
            cut = newline
        pos = start
        if pos == 0:
            if len(out) < n:
                _add_line(fh, 0, end, n, skip, out)
            break
    out.reverse()
    return out


def _add_line(
    fh: Any, start: int, end: int, n: int, skip: Callable[[str], bool] | None, out: list[str]
) -> None:
    """Append the line ``[start, end)`` of ``fh`` unless ``skip`` says otherwise."""
    raw = _read_at(fh, start, min(end - start, MAX_LINE_BYTES))
    text = raw.decode(errors="replace")
    if end - start > MAX_LINE_BYTES:
        text += f" [... {end - start - MAX_LINE_BYTES} more bytes of this line cut]"
    if len(out) < n and (skip is None or not skip(text)):
        out.append(text)


def _read_at(fh: Any, offset: int, size: int) -> bytes:
    fh.seek(offset)
    data: bytes = fh.read(size)
    return data
