"""Checkpoints in a ``%%distrain`` cell: ``save_checkpoint``, ``load_checkpoint``, ``every``.

The directory comes from ``DISTRAIN_CHECKPOINT_DIR`` (``--checkpoint-dir``;
on the local backend it defaults to the job directory's ``checkpoints``).
``load_checkpoint()`` with no argument returns what this run should start
from: after a restart of its workers (``--max-restarts``, a restarted pod)
the latest checkpoint this job saved, otherwise the ``--resume`` target
(``DISTRAIN_RESUME``), otherwise ``None``. Standard library and torch only
(fsspec for URLs).
"""

from __future__ import annotations

import contextlib
import copy
import io
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import preemption
from .. import report as _report
from . import format as fmt
from . import jax as checkpoint_jax
from . import tf as checkpoint_tf
from .commit import (
    env_rank,
    env_text,
    finish_commit,
    folder_entry,
    fsync_enabled,
    job_and_run,
    library_versions,
    prepare_dir,
    saving,
    worker_origin,
)
from .directory import CheckpointDir, HashingWriter
from .format import CheckpointError, CorruptCheckpoint

ENV_DIR = "DISTRAIN_CHECKPOINT_DIR"
ENV_RESUME = "DISTRAIN_RESUME"

__all__ = [
    "CheckpointError",
    "CorruptCheckpoint",
    "Every",
    "every",
    "load_checkpoint",
    "save_checkpoint",
    "wait_for_saves",
]

_dirs: dict[str, CheckpointDir] = {}
_lock = threading.Lock()


def checkpoint_dir(uri: str | None = None) -> CheckpointDir:
    """The :class:`~.directory.CheckpointDir` at ``uri`` or the job's directory (cached)."""
    uri = uri or env_text(ENV_DIR)
    if not uri:
        raise CheckpointError(
            "no checkpoint directory: run the cell with --checkpoint-dir PATH_OR_URL "
            f"(or set {ENV_DIR})"
        )
    with _lock:
        found = _dirs.get(uri)
        if found is None:
            found = _dirs[uri] = CheckpointDir(uri)
        return found


def _floats(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        item = getattr(value, "item", None)
        try:
            out[str(key)] = float(item() if callable(item) else value)
        except (TypeError, ValueError):
            raise CheckpointError(
                f"save_checkpoint(): metric {key!r} must be a number, got {type(value).__name__}"
            ) from None
    return out


def _count(state: Any) -> tuple[int, int]:
    """Tensors in ``state`` and their total number of elements."""
    import torch

    tensors = elements = 0
    stack = [state]
    seen: set[int] = set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            tensors += 1
            elements += obj.numel()
        elif isinstance(obj, Mapping):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return tensors, elements


def _write_full(
    cdir: CheckpointDir,
    state: Any,
    step: int,
    metrics: dict[str, float],
    keep_last: int | None,
    keep_best: str | None,
    token: str,
) -> str:
    with saving(cdir, step):
        return _write_full_unguarded(cdir, state, step, metrics, keep_last, keep_best, token)


def _write_full_unguarded(
    cdir: CheckpointDir,
    state: Any,
    step: int,
    metrics: dict[str, float],
    keep_last: int | None,
    keep_best: str | None,
    token: str,
) -> str:
    import torch

    prepare_dir(cdir)
    path = cdir.fs.join(cdir.root, fmt.payload_name(step, token, fmt.FULL))
    with cdir.fs.atomic_write(path, fsync=fsync_enabled()) as fh:
        writer = HashingWriter(fh)
        try:
            torch.save(state, writer)  # type: ignore[arg-type]
        except BaseException:
            writer.close()
            raise
    digest = writer.hexdigest()  # hashed while the file was written and fsynced
    tensors, elements = _count(state)
    entry = fmt.make_entry(
        step=step,
        token=token,
        layout=fmt.FULL,
        time=time.time(),
        nbytes=writer.bytes,
        sha256=digest,
        metrics=metrics,
        versions=library_versions(("torch",)),
        **worker_origin(),
        tensors=tensors,
        parameters=elements,
    )
    return finish_commit(cdir, entry, keep_last, keep_best)


def _write_sharded(
    cdir: CheckpointDir,
    state: Any,
    step: int,
    metrics: dict[str, float],
    keep_last: int | None,
    keep_best: str | None,
) -> str:
    """Every rank writes its shards with torch.distributed.checkpoint; rank 0 commits."""
    import hashlib
    import warnings

    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    plan: list[Any] = [None]
    if rank == 0:
        prepare_dir(cdir)
        token = secrets.token_hex(3)
        name = fmt.payload_name(step, token, fmt.SHARDED)
        plan = [(token, name, cdir.fs.temp_dir(cdir.root, name))]
    if distributed:
        dist.broadcast_object_list(plan, src=0)
    token, name, tmp = plan[0]
    if cdir.local:
        writer: Any = FileSystemWriter(tmp)
    else:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        writer = FsspecWriter(cdir.fs.uri(tmp))
    try:
        with warnings.catch_warnings():
            if not distributed:  # DCP warns that it saves in a single process
                warnings.simplefilter("ignore", UserWarning)
            dcp_save(state, storage_writer=writer)
    except BaseException:
        if rank == 0:  # never committed: give its space back
            cdir.fs.remove(tmp)
        raise

    def digests(prefix: str | None) -> dict[str, tuple[int, str]]:
        out = {}
        for fname in cdir.fs.listdir(tmp):
            mine = fname.startswith(prefix) if prefix else not fname.startswith("__")
            if mine and not fname.startswith(fmt.TMP_PREFIX):
                data = cdir.fs.read_bytes(cdir.fs.join(tmp, fname)) or b""
                out[fname] = (len(data), hashlib.sha256(data).hexdigest())
        return out

    own = digests(f"__{rank}_")
    shards: list[Any] = [None] * (dist.get_world_size() if distributed else 1)
    if distributed:
        dist.all_gather_object(shards, own)
    else:
        shards = [own]
    uri = ""
    if rank == 0:
        files: dict[str, tuple[int, str]] = digests(None)
        for part in shards:
            files.update(part)
        cdir.fs.commit_dir(tmp, cdir.fs.join(cdir.root, name), fsync=fsync_enabled())
        tensors, elements = _count(state)
        entry = folder_entry(
            step=step,
            token=token,
            layout=fmt.SHARDED,
            files=files,
            metrics=metrics,
            tensors=tensors,
            parameters=elements,
            packages=("torch",),
        )
        uri = finish_commit(cdir, entry, keep_last, keep_best)
    done: list[Any] = [uri]
    if distributed:
        dist.broadcast_object_list(done, src=0)  # every rank returns once it is committed
    return str(done[0])


class _Background:
    """At most one checkpoint being written behind the training loop."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, job: Callable[[], object]) -> None:
        self.wait()

        def run() -> None:
            try:
                job()
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, name="distrain-checkpoint", daemon=True)
        self.thread.start()

    def wait(self, raise_errors: bool = True) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        error, self.error = self.error, None
        if error is not None and raise_errors:
            if isinstance(error, CheckpointError):  # already says which step and why
                raise CheckpointError(f"a background save failed: {error}") from None
            raise CheckpointError(f"a background checkpoint save failed: {error!r}") from error


_background = _Background()


def wait_for_saves(raise_errors: bool = True) -> None:
    """Block until a background save has been committed (re-raise its failure)."""
    _background.wait(raise_errors)


def save_checkpoint(
    state: Any,
    step: int,
    metrics: Mapping[str, Any] | None = None,
    *,
    sharded: bool = False,
    keep_last: int | None = None,
    keep_best: str | None = None,
    background: bool = False,
    uri: str | None = None,
) -> str | None:
    """Save ``state`` (a state_dict bundle: model, optimizer, anything picklable) as ``step``.

    Full (default): rank 0 writes one ``torch.save`` file; other ranks write
    nothing and return ``None`` (call it on every rank or on rank 0 alone).
    ``sharded=True``: every rank must call it; each writes its shards through
    ``torch.distributed.checkpoint``. The checkpoint is listed, and a
    ``checkpoint`` line sent, only once it is completely written. ``metrics``
    are recorded with it; ``keep_last=K`` then removes all but the last K
    steps, keeping also the best by ``keep_best`` (``"loss"``,
    ``"accuracy:max"``). ``background=True`` (full only) copies the state and
    writes it on a thread, returning at once; the next save, load or the end
    of the cell waits for it. Returns the checkpoint's URI on the writing rank.
    """
    step = fmt.check_step(step)
    values = _floats(metrics)
    if keep_best:
        fmt.parse_best(keep_best)
    cdir = checkpoint_dir(uri)
    if checkpoint_tf.is_tensorflow(state):  # every worker calls it; the chief writes (see .tf)
        if sharded or background:
            raise CheckpointError("TensorFlow checkpoints take neither sharded= nor background=")
        wait_for_saves()
        with saving(cdir, step):
            return checkpoint_tf.save(cdir, state, step, values, keep_last, keep_best)
    if checkpoint_jax.is_jax(state):  # every process calls it; process 0 writes (see .jax)
        if sharded or background:
            raise CheckpointError("JAX checkpoints take neither sharded= nor background=")
        wait_for_saves()
        with saving(cdir, step):
            return checkpoint_jax.save(cdir, state, step, values, keep_last, keep_best)
    if sharded:
        if background:
            raise CheckpointError("background=True is for full checkpoints, not sharded=True")
        wait_for_saves()
        with saving(cdir, step):
            return _write_sharded(cdir, state, step, values, keep_last, keep_best)
    if env_rank() != 0:
        return None
    token = secrets.token_hex(3)
    args = (step, values, keep_last, keep_best, token)
    if not background:
        wait_for_saves()
        return _write_full(cdir, state, *args)
    snapshot = copy.deepcopy(state)  # the training loop may change ``state`` right away
    _background.start(lambda: _write_full(cdir, snapshot, *args))
    return cdir.fs.uri(cdir.fs.join(cdir.root, fmt.payload_name(step, token, fmt.FULL)))


def resume_target(cdir: CheckpointDir | None) -> tuple[CheckpointDir, fmt.Entry] | None:
    """What ``load_checkpoint()`` returns: own latest after a restart, else ``--resume``."""
    job, run = job_and_run()
    if cdir is not None and job:
        own = [e for e in cdir.entries() if e.get("job") == job and e.get("run") == run]
        good = [e for e in own if e["status"] == fmt.OK]
        if good:
            return cdir, good[-1]
    resume = env_text(ENV_RESUME)
    if not resume:
        return None
    found = find_checkpoint(fmt.parse_which(resume), cdir)
    if found is None:
        where = cdir.uri if cdir is not None else resume
        raise CheckpointError(f"--resume {resume}: no complete checkpoint in {where}")
    return found


def find_checkpoint(
    which: int | str, cdir: CheckpointDir | None
) -> tuple[CheckpointDir, fmt.Entry] | None:
    """Resolve ``latest`` (``None`` if there is none) or a step in ``cdir``, or a URI.

    A URI names a checkpoint (``.../step-000000040-1a2b3c.pt``) or a
    directory (its latest). Raise :class:`CheckpointError` for a step or
    checkpoint that is not there.
    """
    if isinstance(which, str) and which != "latest":
        base = which.rstrip("/").rsplit("/", 1)[-1]
        if fmt.is_payload_name(base):
            cdir, which = CheckpointDir(which.rstrip("/")[: -len(base) - 1] or "/"), base
        else:
            cdir, which = CheckpointDir(which), "latest"
    if cdir is None:
        raise CheckpointError(
            f"load_checkpoint({which!r}): no checkpoint directory; run the cell with "
            "--checkpoint-dir PATH_OR_URL"
        )
    entries = cdir.entries()
    if which == "latest":
        good = [e for e in entries if e["status"] == fmt.OK]
        return (cdir, good[-1]) if good else None
    entry = fmt.select(entries, which)
    if entry is None:
        steps = ", ".join(str(e["step"]) for e in entries[-10:]) or "none"
        raise CheckpointError(f"no checkpoint {which!r} in {cdir.uri} (last steps: {steps})")
    return cdir, entry


def load_checkpoint(
    which: int | str | None = None,
    *,
    into: Any = None,
    map_location: Any = "cpu",
    weights_only: bool = True,
) -> Any:
    """The saved state, or ``None`` when there is none to load.

    Loads with torch's safe loader (``weights_only=True``: tensors, numbers,
    strings and containers of them). A checkpoint holding other Python objects
    needs ``weights_only=False``, which runs the pickled code: only for
    checkpoints you trust.

    ``which``: ``None`` (what this run resumes from, see the module
    docstring), ``"latest"``, a step, or a checkpoint or directory URI. A
    sharded checkpoint is loaded in place into ``into`` (a state dict of the
    same structure, on every rank) and returned; without ``into`` every rank
    gets the whole state. A damaged checkpoint raises
    :class:`CorruptCheckpoint`, except that the latest one falls back to the
    one before it, with a warning.
    """
    wait_for_saves()
    cdir = checkpoint_dir() if env_text(ENV_DIR) else None
    if which is None:
        found = resume_target(cdir)
        fallback = True
    else:
        parsed = fmt.parse_which(which)
        found = find_checkpoint(parsed, cdir)
        fallback = parsed == "latest"
    if found is None:
        return None
    owner, entry = found
    candidates = [entry]
    if fallback:
        older = [e for e in owner.entries() if e["status"] == fmt.OK and e["step"] < entry["step"]]
        candidates += older[::-1]
    for i, candidate in enumerate(candidates):
        try:
            state = _load(owner, candidate, into, map_location, weights_only)
        except CorruptCheckpoint as exc:
            if i + 1 == len(candidates):
                raise
            print(f"jupyter_disttrain: skipping damaged checkpoint: {exc}", file=sys.stderr)
            continue
        if env_rank() == 0:
            print(
                f"jupyter_disttrain: loaded checkpoint step {candidate['step']} "
                f"({candidate['uri']})",
                flush=True,
            )
            _report.emit("loaded", step=candidate["step"], uri=owner.payload_uri(candidate))
        return state
    return None


def _load(
    cdir: CheckpointDir, entry: fmt.Entry, into: Any, map_location: Any, weights_only: bool
) -> Any:
    hint = fmt.not_torch_state(entry, cdir.payload_uri(entry))
    if hint is not None:
        raise CheckpointError(hint)
    layout = fmt.layout_of(entry)
    own = fmt.format_of(layout)
    if own is not None and own.loader:  # a framework's own format (TensorFlow, JAX, ...)
        return fmt.function_of(own.loader)(cdir, entry, into)
    import torch

    if entry.get("status") not in (fmt.OK, None):
        raise CorruptCheckpoint(
            f"checkpoint step {entry['step']} is {entry['status']}: {entry.get('reason')}"
        )
    if layout != fmt.SHARDED:
        data = cdir.read_verified(entry)
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
    status, reason = cdir.verify(entry)
    if status != fmt.OK:
        raise CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
    return load_sharded(cdir, entry, into)


def load_sharded(cdir: CheckpointDir, entry: fmt.Entry, into: Any = None) -> Any:
    """A sharded checkpoint: in place into ``into``, or whole (no process group needed)."""
    import warnings

    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    path = cdir.payload_path(entry)
    if cdir.local:
        reader: Any = FileSystemReader(path)
    else:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        reader = FsspecReader(cdir.fs.uri(path))
    if into is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "loads in a single process"
            dcp_load(into, storage_reader=reader)
        return into
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _load_state_dict_from_keys(storage_reader=reader)


class Every:
    """``every(n)``: true at steps ``n, 2n, ...`` (not 0), or when ``seconds`` have passed."""

    def __init__(self, n: int | None = None, seconds: float | None = None) -> None:
        if n is None and seconds is None:
            raise ValueError("every() needs a number of steps, seconds=..., or both")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"every(n): n must be an int >= 1, got {n!r}")
        self.n = n
        self.seconds = seconds
        self._last = time.monotonic()

    def __call__(self, step: int) -> bool:
        """Whether to act at ``step``."""
        step = fmt.check_step(step)
        due = self.n is not None and step > 0 and step % self.n == 0
        if not due and env_rank() == 0 and preemption.pending():  # the writer saves a last one
            due = True
        now = time.monotonic()
        if self.seconds is not None and now - self._last >= self.seconds:
            due = True
        if due:
            self._last = now
        return due


def every(n: int | None = None, step: int | None = None, *, seconds: float | None = None) -> Any:
    """``every(10, step)`` -> bool; ``every(10)`` or ``every(seconds=60)`` -> an :class:`Every`.

    ``if every(10, step): save_checkpoint(state, step)`` saves at steps 10,
    20, ... in one line.
    """
    if step is not None and seconds is not None:
        raise ValueError(
            "every(seconds=...) keeps time: make it once (rule = every(seconds=60)) "
            "and call rule(step) in the loop"
        )
    rule = Every(n, seconds)
    return rule if step is None else rule(step)


def resume_step() -> int | None:
    """The step :func:`load_checkpoint` would load with no argument (no data read)."""
    with contextlib.suppress(CheckpointError):
        found = resume_target(checkpoint_dir() if env_text(ENV_DIR) else None)
        return None if found is None else int(found[1]["step"])
    return None
