"""Checkpoints of jobs: a job's checkpoint directory, resume cells, option pre-flight.

The one place that knows where a job's checkpoints are: the job's
``--checkpoint-dir``, else the directory its ranks reported saving into,
else the backend's own default (backends that keep checkpoints on a path
this machine can read declare ``checkpoints_on_path``). For a job listed
from another process only what its backend recorded counts (see
:func:`record_checkpoint_dir`).
"""

from __future__ import annotations

import os
import pickle
import secrets
from collections.abc import Mapping
from pathlib import Path

from ..backends.base import Backend, JobRecord
from ..backends.registry import backend_class, names
from ..job import Job
from ..runtime.checkpoint import format as fmt
from ..runtime.checkpoint.api import find_checkpoint
from ..runtime.checkpoint.directory import CheckpointDir
from ..runtime.checkpoint.format import CheckpointError
from ..spec import JobSpec, SpecError
from .store import CheckpointStore


def checkpoint_uri(job: Job) -> str:
    """Where ``job`` writes checkpoints (see :meth:`~.job.Job.checkpoint_dir`)."""
    return job.checkpoint_dir()


def record_checkpoint_dir(record: JobRecord, backend: Backend) -> str | None:
    """Where a listed job's checkpoints are, as its backend recorded at submission; or None.

    Never a location a log line names (reported checkpoints are printed text):
    a backend whose checkpoints are on a path this machine reads gives the
    job's ``--checkpoint-dir`` or its default directory, when it exists.
    """
    if not backend.capabilities.checkpoints_on_path:
        return None
    path = backend.checkpoint_dir(record)
    if path is None:
        return None
    return path if "://" in path or os.path.isdir(path) else None


def store_for(target: str | None, jobs: Mapping[str, Job]) -> tuple[CheckpointStore, Job | None]:
    """The store ``%distrain_checkpoints TARGET`` means: a job of this kernel, a URI or a job.

    No target: the last job of this kernel.
    """
    if not target:
        if not jobs:
            raise CheckpointError("no job in this kernel yet: give a checkpoint URI or a job name")
        job = list(jobs.values())[-1]
        return CheckpointStore(checkpoint_uri(job)), job
    if target in jobs:
        return CheckpointStore(checkpoint_uri(jobs[target])), jobs[target]
    if "://" in target or os.sep in target or os.path.isdir(target):
        return CheckpointStore(target), None
    for name in names():
        cls = backend_class(name)
        if not (cls.capabilities.checkpoints_on_path and cls.configured()):
            continue
        backend = cls.create()
        for record in backend.list_jobs():
            path = backend.checkpoint_dir(record) if record.name == target else None
            if path is not None:
                return CheckpointStore(path), None
    raise CheckpointError(
        f"{target!r} is neither a job of this kernel, a local job nor a checkpoint directory; "
        "give a path or URL (e.g. s3://bucket/run1) or a job name (%distrain_jobs lists them)"
    )


def cell_source(job: Job) -> str | None:
    """The cell a job ran: from its plan, else from a payload file it left, if readable."""
    if job.plan is not None:
        return job.plan.payload.source
    directory = getattr(job.backend, "job_directory", None)
    if directory is None:
        return None
    try:
        with open(os.path.join(directory(job.name), "payload.pkl"), "rb") as fh:
            envelope = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError):
        return None
    source = envelope.get("source") if isinstance(envelope, dict) else None
    return source if isinstance(source, str) else None


def resume_cell(uri: str, step: int, job: Job | None = None) -> str:
    """A ``%%distrain`` cell that resumes from ``step`` of ``uri`` (the job's cell if known)."""
    spec = job.spec if job is not None else None
    flags = []
    if spec is not None:
        flags += [f"--nodes {spec.nodes}", f"--nproc {spec.nproc}"]
        if spec.backend != names()[0]:  # the default backend needs no flag
            flags.append(f"--backend {spec.backend}")
        if spec.max_restarts:
            flags.append(f"--max-restarts {spec.max_restarts}")
    flags += [f"--checkpoint-dir {uri}", f"--resume {step}"]
    body = cell_source(job) if job is not None else None
    if body is None:
        body = (
            f"state = load_checkpoint()  # step {step} of {uri}\n"
            "# ... restore the model and optimizer from state, then train on\n"
        )
    return "%%distrain " + " ".join(flags) + "\n" + body.rstrip("\n") + "\n"


class CheckpointOptionError(SpecError):
    """``--checkpoint-dir`` or ``--resume`` cannot be used (the message says why)."""


def preflight(spec: JobSpec, *, create: bool = True) -> JobSpec:
    """Check ``--checkpoint-dir``/``--resume`` before the job starts; normalise paths.

    For backends whose checkpoints are on a path this machine reads. Raises
    :class:`CheckpointOptionError` for an unwritable directory, a protocol
    whose fsspec package is missing, or a resume target that is not there.
    The directory is made (and written to once) unless ``create`` is False (a
    dry run): then a local one's nearest existing folder must be writable, and
    nothing is made.
    """
    if not (spec.checkpoint_dir or spec.resume):
        return spec
    changes: dict[str, object] = {}
    cdir = None
    if spec.checkpoint_dir:
        try:
            cdir = CheckpointDir(spec.checkpoint_dir)
        except CheckpointError as exc:
            raise CheckpointOptionError(f"--checkpoint-dir: {exc}") from None
        if create:
            _check_writable(cdir, spec.checkpoint_dir)
        elif cdir.local:
            _check_could_write(cdir.root, spec.checkpoint_dir)
        changes["checkpoint_dir"] = cdir.uri
    if spec.resume:
        which = fmt.parse_which(spec.resume)
        try:
            found = find_checkpoint(which, cdir)
        except CheckpointError as exc:
            raise CheckpointOptionError(f"--resume {spec.resume}: {exc}") from None
        except Exception as exc:
            raise CheckpointOptionError(f"--resume {spec.resume}: cannot read it: {exc}") from None
        if found is None:
            where = cdir.uri if cdir is not None and which == "latest" else spec.resume
            raise CheckpointOptionError(
                f"--resume {spec.resume}: no complete checkpoint in {where} yet; run without "
                "--resume to start from scratch"
            )
        if isinstance(which, str) and which != "latest":
            changes["resume"] = found[0].payload_uri(found[1])
    return spec.with_(**changes) if changes else spec


def _check_could_write(root: str, given: str) -> None:
    """Raise unless the nearest existing folder of local ``root`` can be written to."""
    path = Path(root)
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        problem = "not a directory"
    elif not os.access(path, os.W_OK | os.X_OK):
        problem = "permission denied"
    else:
        return
    raise _not_writable(given, f"{problem}: {path}")


def _check_writable(cdir: CheckpointDir, given: str) -> None:
    probe = cdir.fs.join(cdir.root, fmt.META_DIR, f"{fmt.TMP_PREFIX}probe-{secrets.token_hex(4)}")
    try:
        cdir.prepare()
        cdir.fs.write_bytes(probe, b"", fsync=False)
        cdir.fs.remove(probe)
    except Exception as exc:
        detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise _not_writable(given, detail) from None


def _not_writable(given: str, detail: str) -> CheckpointOptionError:
    return CheckpointOptionError(
        f"--checkpoint-dir {given} is not writable ({detail}); choose a directory you can write to"
    )
