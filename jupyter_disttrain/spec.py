"""JobSpec: the neutral description of a distributed job.

Pure: no I/O but reading the registered backend and framework names (see
:mod:`.plugins`), no backend types. Every backend turns a :class:`JobSpec` into
its own launch request; the magics and the command line build one from user
input through :func:`validate`, which raises :class:`SpecError` with a message
that names the problem and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from .plugins import BACKENDS, DEFAULT_FRAMEWORK, FRAMEWORKS, INTEGRATIONS, SpecRules

DistBackend = Literal["auto", "gloo", "nccl"]

DIST_BACKENDS: tuple[str, ...] = ("auto", "gloo", "nccl")

#: A job name becomes a directory name here and a DNS-1035 label on Kubernetes.
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NODES = 1024
MAX_NPROC = 256
#: Longest time option (--timeout, --grace-period, --hang-after): a year, in seconds.
MAX_SECONDS = 366 * 24 * 3600.0
#: Most restarts a job may ask for: a year of daily preemptions with room to spare, and far
#: inside torchrun's and Kubernetes' integer fields (a larger number is a typing slip).
MAX_RESTARTS = 1000

#: The label that says what a job is: ``session`` for a warm worker group (absent: a job).
SOURCE_LABEL: Final = "source"
#: That label's earlier name: jobs recorded before still carry it, and are read with it.
OLD_SOURCE_LABEL: Final = "kind"


def job_source(labels: Mapping[str, str]) -> str:
    """``session`` when ``labels`` mark a warm worker group (under either name), else ``job``."""
    marks = (labels.get(SOURCE_LABEL), labels.get(OLD_SOURCE_LABEL))
    return "session" if "session" in marks else "job"


class SpecError(ValueError):
    """A job description that cannot run; the message says what to change."""


@dataclass(frozen=True)
class JobSpec:
    """What to run and at what scale, independent of where it runs.

    ``nodes`` x ``nproc`` workers run the same payload. ``env`` is added to
    every worker's environment. ``timeout`` (seconds, ``None`` for none)
    bounds the whole job. ``grace_period`` (seconds) is how long a worker
    has after SIGTERM to save a last checkpoint. ``hang_after`` (seconds, 0 for
    never, ``None`` for the runtime's default) is how long every rank may stay
    silent before the job takes its ranks' stacks and reads a hang. ``options``
    carries backend-specific settings (image, resources, ...) as plain strings
    so the spec stays neutral. ``tensorboard`` is where the job's metrics go as
    TensorBoard event files (``None``: the default place, ``"off"``: nowhere);
    ``mlflow`` a tracking URI that makes the job an MLflow run (``None``: none).
    so the spec stays neutral. ``labels`` are recorded with the job and shown by
    listings (``("source", "session")`` marks a warm worker group: :func:`job_source`).
    """

    name: str
    nodes: int = 1
    nproc: int = 1
    backend: str = "local"
    framework: str = DEFAULT_FRAMEWORK
    dist_backend: DistBackend = "auto"
    env: tuple[tuple[str, str], ...] = ()
    timeout: float | None = None
    max_restarts: int = 0
    checkpoint_dir: str | None = None
    resume: str | None = None
    grace_period: float | None = None
    hang_after: float | None = None
    options: tuple[tuple[str, str], ...] = field(default=())
    tensorboard: str | None = None
    mlflow: str | None = None
    labels: tuple[tuple[str, str], ...] = field(default=())
    #: A rank whose code raises stays paused in the raising frame (``--post-mortem``).
    post_mortem: bool = False
    #: Stacks (Where?, a hang) show the locals of the user's frames (``--where-locals``).
    where_locals: bool = False
    #: Libraries whose training loops report themselves: ``all``, ``off``, or names
    #: (``lightning,hf``); see :func:`autolog_value`.
    autolog: str = "all"

    @property
    def world_size(self) -> int:
        """Total number of worker processes."""
        return self.nodes * self.nproc

    def env_dict(self) -> dict[str, str]:
        """The user's extra environment as a dict."""
        return dict(self.env)

    def with_(self, **changes: object) -> JobSpec:
        """A copy with ``changes`` applied and validated."""
        return validate(replace(self, **changes))  # type: ignore[arg-type]


def parse_env(items: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Parse ``K=V`` strings; raise :class:`SpecError` on a malformed item."""
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(f"--env {item!r} has no '='; write it as KEY=VALUE, e.g. --env LR=0.1")
        if not ENV_KEY_RE.fullmatch(key):
            raise SpecError(
                f"--env key {key!r} is not a valid environment variable name; "
                "use letters, digits and underscores, not starting with a digit"
            )
        if "\0" in value:
            raise SpecError(
                f"--env {key}: the value contains a NUL character, which no "
                "environment variable can hold; remove it"
            )
        out.append((key, value))
    return tuple(out)


def validate(spec: JobSpec) -> JobSpec:
    """Return ``spec`` unchanged if it can run; raise :class:`SpecError` otherwise."""
    if not isinstance(spec.name, str) or not NAME_RE.fullmatch(spec.name):
        raise SpecError(
            f"job name {spec.name!r} is not allowed; use 1-40 lowercase letters, digits "
            "and '-', starting with a letter and not ending with '-' (e.g. --name mnist-ddp)"
        )
    if not 1 <= spec.nodes <= MAX_NODES:
        raise SpecError(f"--nodes must be between 1 and {MAX_NODES}, got {spec.nodes}")
    if not 1 <= spec.nproc <= MAX_NPROC:
        raise SpecError(f"--nproc must be between 1 and {MAX_NPROC}, got {spec.nproc}")
    if not BACKENDS.known(spec.backend):
        raise SpecError(
            f"unknown --backend {spec.backend!r}; choose one of: {', '.join(BACKENDS.names())}"
        )
    if not FRAMEWORKS.known(spec.framework):
        raise SpecError(
            f"unknown --framework {spec.framework!r}; choose one of: "
            f"{', '.join(FRAMEWORKS.names())}"
        )
    if spec.dist_backend not in DIST_BACKENDS:
        raise SpecError(
            f"unknown --dist-backend {spec.dist_backend!r}; choose one of: "
            f"{', '.join(DIST_BACKENDS)}"
        )
    _check_seconds("--timeout", spec.timeout, "leave --timeout out for no limit")
    _check_seconds("--grace-period", spec.grace_period, "leave it out for the default (30)")
    _check_seconds("--hang-after", spec.hang_after, "0 turns the hang watch off")
    if spec.timeout is not None and not spec.timeout > 0:
        raise SpecError(f"--timeout must be a positive number of seconds, got {spec.timeout}")
    if spec.grace_period is not None and not spec.grace_period >= 1:
        raise SpecError(
            f"--grace-period must be at least 1 second, got {spec.grace_period:g}; it is how "
            "long a worker has, after SIGTERM, to save a last checkpoint"
        )
    if spec.hang_after is not None and not (spec.hang_after == 0 or spec.hang_after >= 1):
        raise SpecError(
            f"--hang-after must be 0 (never) or at least 1 second, got {spec.hang_after:g}; it "
            "is how long every rank may stay silent before the job reads where they are"
        )
    if not 0 <= spec.max_restarts <= MAX_RESTARTS:
        raise SpecError(
            f"--max-restarts must be from 0 to {MAX_RESTARTS}, got {spec.max_restarts}; a job "
            "that fails that often is crash-looping: read its reason, fix it, and run it again"
        )
    _check_checkpoint_options(spec)
    _check_tracking_options(spec)
    if autolog_value(spec.autolog) != spec.autolog:
        raise SpecError(f"autolog {spec.autolog!r} is not normalised; build it with autolog_value")
    rules: SpecRules = FRAMEWORKS.load(spec.framework)
    rules.check_spec(spec)  # what the framework itself rules out (TensorFlow: --nproc 1)
    for key, value in spec.env:
        if not ENV_KEY_RE.fullmatch(key):
            raise SpecError(f"environment variable name {key!r} is not valid")
        if "\0" in value:
            raise SpecError(f"--env {key}: the value contains a NUL character; remove it")
        if key in RESERVED_ENV:
            raise SpecError(
                f"--env {key}=... would override a variable the launcher sets for each "
                f"worker ({key}); remove it and read the value the launcher provides"
            )
    return spec


#: What turns autolog off (``--no-autolog``, ``autolog=0``).
AUTOLOG_OFF = ("0", "off", "false", "no", "none")


def autolog_value(text: object) -> str:
    """``--autolog`` / ``autolog=`` as the spec keeps it: ``all``, ``off`` or sorted names.

    Raises :class:`SpecError` for a library no integration is registered for.
    """
    value = str(text).strip().lower()
    if value in ("", "all", "1", "on", "true", "yes"):
        return "all"
    if value in AUTOLOG_OFF:
        return "off"
    names = sorted({part.strip() for part in value.split(",") if part.strip()})
    unknown = [name for name in names if not INTEGRATIONS.known(name)]
    if unknown:
        raise SpecError(
            f"autolog: no integration for {', '.join(map(repr, unknown))}; choose among "
            f"{', '.join(INTEGRATIONS.names())} (comma-separated), all, or 0 for none"
        )
    return ",".join(names)


def _check_seconds(flag: str, value: float | None, fix: str) -> None:
    """A time option is a finite number of seconds, at most :data:`MAX_SECONDS`."""
    if value is None:
        return
    if not math.isfinite(value):
        raise SpecError(f"{flag} must be a finite number of seconds, got {value}; {fix}")
    if value > MAX_SECONDS:
        raise SpecError(
            f"{flag} {value:g} is more than a year ({MAX_SECONDS:.0f} seconds); give at most "
            f"that, or {fix}"
        )


#: Variables the launcher owns; a user override would break the job.
RESERVED_ENV: frozenset[str] = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TF_CONFIG",
        "TORCHELASTIC_RUN_ID",
    }
)


def _check_checkpoint_options(spec: JobSpec) -> None:
    """``--checkpoint-dir`` and ``--resume latest|STEP|URI``, as far as text can tell."""
    if spec.checkpoint_dir is not None and not spec.checkpoint_dir.strip():
        raise SpecError("--checkpoint-dir is empty; give a path or a URL such as s3://bucket/run")
    for flag, text in (
        ("--checkpoint-dir", spec.checkpoint_dir),
        ("--resume", spec.resume),
        ("--tensorboard", spec.tensorboard),
    ):
        if text is not None and any(ord(c) < 32 for c in text):
            raise SpecError(
                f"{flag} {text!r} contains a control character (a newline?); give the path "
                "or URL without it"
            )
    if spec.resume is None:
        return
    resume = spec.resume.strip()
    if not resume:
        raise SpecError("--resume is empty; use --resume latest, a step number or a checkpoint URI")
    if resume == "latest" or resume.isdigit():
        if not spec.checkpoint_dir:
            raise SpecError(
                f"--resume {resume} needs --checkpoint-dir (the directory to resume from), "
                "or give the checkpoint's URI: --resume PATH_OR_URL"
            )
    elif resume.lstrip("-").isdigit():
        raise SpecError(f"--resume {resume}: a step must be 0 or more")
    elif "/" not in resume:
        raise SpecError(
            f"--resume {resume!r} is not 'latest', a step number or a checkpoint path or URL"
        )


#: ``--tensorboard off`` writes no event files.
TENSORBOARD_OFF = "off"


def _check_tracking_options(spec: JobSpec) -> None:
    """``--tensorboard DIR|off`` and ``--mlflow URI``, as far as text can tell."""
    if spec.tensorboard is not None and not spec.tensorboard.strip():
        raise SpecError(
            "--tensorboard is empty; give a directory (event files go to DIR/NAME/rank-R), "
            f"or {TENSORBOARD_OFF} to write none"
        )
    uri = spec.mlflow
    if uri is not None and (not uri.strip() or any(c.isspace() for c in uri)):
        raise SpecError(
            f"--mlflow {uri!r} is not a tracking URI; give one such as "
            "http://127.0.0.1:5000 or sqlite:///mlflow.db"
        )
