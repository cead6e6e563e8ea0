"""The job options, defined once for the ``%%distrain`` magic and the ``disttrain`` command.

:data:`JOB_OPTIONS` is a list of argparse ``(flags, kwargs)``;
:func:`spec_from_args` turns parsed options into a validated
:class:`~jupyter_disttrain.spec.JobSpec`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import math
import secrets
from typing import Any

from . import frameworks
from .backends.base import BackendOption
from .backends.registry import backend_class, names
from .spec import (
    DIST_BACKENDS,
    MAX_SECONDS,
    JobSpec,
    SpecError,
    autolog_value,
    parse_env,
    validate,
)

Option = tuple[tuple[str, ...], dict[str, Any]]


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, at most :data:`~.spec.MAX_SECONDS`.

    Negative values pass: the option's own check says what it accepts.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (e.g. 600)"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a finite number of seconds; give a number such as 3600, or leave "
            "the option out"
        )
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text} seconds is more than a year; give at most {MAX_SECONDS:.0f}"
        )
    return value


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more")
    return value


#: Defaults of ``None`` are filled from configuration (see :func:`spec_from_args`).
JOB_OPTIONS: list[Option] = [
    (
        ("--nodes",),
        {
            "type": int,
            "default": None,
            "metavar": "N",
            "help": "number of nodes (torchrun agents); default 1",
        },
    ),
    (
        ("--nproc",),
        {
            "type": int,
            "default": None,
            "metavar": "M",
            "help": "worker processes per node; default 1",
        },
    ),
    (
        ("--backend",),
        {
            "default": None,
            "metavar": "NAME",
            "help": f"where to run: {', '.join(names())}; default {names()[0]}",
        },
    ),
    (
        ("--name",),
        {"default": None, "help": "job name (lowercase, digits, '-'); default generated"},
    ),
    (
        ("--env",),
        {
            "action": "append",
            "default": [],
            "metavar": "K=V",
            "help": "environment variable for every worker (repeatable)",
        },
    ),
    (
        ("--timeout",),
        {
            "type": seconds,
            "default": None,
            "metavar": "SECONDS",
            "help": "stop the job if it runs longer than this",
        },
    ),
    (
        ("--framework",),
        {
            "default": None,
            "metavar": "NAME",
            "help": f"{' or '.join(frameworks.names())}; default {frameworks.names()[0]}",
        },
    ),
    (
        ("--dist-backend",),
        {
            "default": "auto",
            "metavar": "NAME",
            "help": f"process group backend: {', '.join(DIST_BACKENDS)}; auto "
            "picks nccl with CUDA, else gloo",
        },
    ),
    (
        ("--max-restarts",),
        {
            "type": int,
            "default": 0,
            "metavar": "N",
            "help": "restart all workers up to N times after a failure",
        },
    ),
    (
        ("--checkpoint-dir",),
        {
            "default": None,
            "metavar": "URI",
            "help": "where save_checkpoint() writes: a path or fsspec URL "
            "(s3://...); local default: the job directory",
        },
    ),
    (
        ("--grace-period",),
        {
            "type": seconds,
            "default": None,
            "metavar": "SECONDS",
            "help": "after SIGTERM (preemption), save a last checkpoint within "
            "this time, then exit for a restart (default 30; pods' "
            "terminationGracePeriodSeconds)",
        },
    ),
    (
        ("--hang-after",),
        {
            "type": seconds,
            "default": None,
            "metavar": "SECONDS",
            "help": "when no rank wrote anything for this long, take every "
            "rank's stacks and say which ranks hold the others up (default 300; "
            "0: never)",
        },
    ),
    (
        ("--resume",),
        {
            "default": None,
            "metavar": "latest|STEP|URI",
            "help": "load_checkpoint() returns this checkpoint when the job starts",
        },
    ),
    (
        ("--tensorboard",),
        {
            "default": None,
            "metavar": "DIR",
            "help": "write every rank's reported metrics as TensorBoard event "
            "files under DIR/NAME/rank-R (default: the job home's tensorboard "
            "folder when tensorboard is installed; off: none)",
        },
    ),
    (
        ("--mlflow",),
        {
            "default": None,
            "metavar": "URI",
            "help": "make the job an MLflow run at this tracking URI: options as "
            "params, every rank's metrics, checkpoints, final status",
        },
    ),
    (
        ("--post-mortem",),
        {
            "action": "store_true",
            "help": "a rank whose code raises stays paused in the raising frame "
            "for the debugger (job.debug(rank), %%distrain_debug); Stop ends all",
        },
    ),
    (
        ("--where-locals",),
        {
            "action": "store_true",
            "help": "Where? and a hang's stacks also show the locals of your "
            "own frames (values shortened)",
        },
    ),
    (
        ("--autolog",),
        {
            "default": None,
            "metavar": "LIBS",
            "help": "libraries whose training loops report metrics, progress and "
            "checkpoints by themselves: all (default), or some of lightning, hf, "
            "keras, accelerate (comma-separated)",
        },
    ),
    (
        ("--no-autolog",),
        {
            "action": "store_true",
            "help": "no automatic reporting from Lightning, Hugging Face, Keras or "
            "Accelerate: only the cell's own report() calls",
        },
    ),
    (
        ("--dry-run",),
        {
            "action": "store_true",
            "help": "print the exact launch plan (or Kubernetes YAML) and run nothing",
        },
    ),
    (
        ("--export",),
        {
            "default": None,
            "metavar": "FILE.yaml",
            "help": "kubernetes: write the objects as YAML for kubectl and run nothing",
        },
    ),
]


def _argparse(option: BackendOption, backend: str) -> Option:
    help_text = option.help if option.help.startswith(backend) else f"{backend}: {option.help}"
    if option.switch:
        return (option.flag,), {"action": "store_true", "help": help_text}
    if option.optional:
        return (option.flag,), {
            "nargs": "?",
            "const": "true",
            "default": None,
            "metavar": option.metavar,
            "help": help_text,
        }
    if option.repeatable:
        return (option.flag,), {
            "action": "append",
            "default": [],
            "metavar": option.metavar,
            "help": help_text + " (repeatable)",
        }
    return (option.flag,), {"default": None, "metavar": option.metavar, "help": help_text}


def declared_options() -> dict[str, tuple[str, BackendOption]]:
    """Every backend's declared options by key: ``(backend name, option)``."""
    out: dict[str, tuple[str, BackendOption]] = {}
    for name in names():
        for option in backend_class(name).options:
            out.setdefault(option.key, (name, option))
    return out


#: Options only some backends understand (declared by them), carried in ``JobSpec.options``.
BACKEND_OPTIONS: list[Option] = [
    _argparse(option, backend) for backend, option in declared_options().values()
]
JOB_OPTIONS.extend(BACKEND_OPTIONS)


def backend_options(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """The backend-specific options given, as ``(key, value)`` pairs."""
    out: list[tuple[str, str]] = []
    for key, (_, option) in declared_options().items():
        value = getattr(args, key, None)
        if option.repeatable:
            out.extend((key, str(v)) for v in value or [])
        elif option.switch:
            if value:
                out.append((key, "true"))
        elif value is not None:
            out.append((key, str(value)))
    return tuple(out)


def default_name(prefix: str = "job") -> str:
    """A fresh job name such as ``job-1121-231500-a3f9``."""
    now = datetime.datetime.now()
    return f"{prefix}-{now:%m%d-%H%M%S}-{secrets.token_hex(2)}"


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """Add :data:`JOB_OPTIONS` to ``parser``."""
    for flags, kwargs in JOB_OPTIONS:
        parser.add_argument(*flags, **kwargs)


def spec_from_args(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> JobSpec:
    """A validated spec from parsed options; ``defaults`` fill options left unset.

    Raises :class:`~jupyter_disttrain.spec.SpecError` naming the bad option.
    """
    conf = defaults or {}

    def pick(key: str, fallback: Any) -> Any:
        value = getattr(args, key, None)
        return value if value is not None else conf.get(key, fallback)

    for key in ("nodes", "nproc", "max_restarts"):
        value = getattr(args, key, None)
        if isinstance(value, int) and value < (0 if key == "max_restarts" else 1):
            flag = "--" + key.replace("_", "-")
            raise SpecError(
                f"{flag} must be at least {0 if key == 'max_restarts' else 1}, got {value}"
            )
    timeout = pick("timeout", None)
    backend = str(pick("backend", names()[0]))
    if backend not in names():
        raise SpecError(f"unknown --backend {backend!r}; choose one of: {', '.join(names())}")
    caps = backend_class(backend).capabilities
    extra = backend_options(args)
    _check_declared(backend, extra)
    if getattr(args, "export", None) and not caps.exports_plans:
        makers = [n for n in names() if backend_class(n).capabilities.exports_plans]
        raise SpecError(
            f"--export writes manifests to apply elsewhere; the {backend} backend has none: "
            f"add --backend {' or '.join(makers)}, or use --dry-run to see the plan"
        )
    framework = str(pick("framework", frameworks.names()[0])).lower()
    if frameworks.known(framework):
        if not caps.runs(framework):
            raise SpecError(
                f"--framework {framework} does not run on the {backend} backend; it runs "
                f"{', '.join(sorted(caps.framework_names()))}"
            )
        _check_framework(args, backend, extra, frameworks.framework(framework))
    spec = validate(
        JobSpec(
            name=args.name or default_name(),
            nodes=int(pick("nodes", 1)),
            nproc=int(pick("nproc", 1)),
            backend=backend,
            framework=framework,
            dist_backend=str(args.dist_backend).lower(),  # type: ignore[arg-type]
            env=parse_env(list(args.env or [])),
            timeout=float(timeout) if timeout is not None else None,
            max_restarts=int(args.max_restarts),
            checkpoint_dir=getattr(args, "checkpoint_dir", None),
            resume=getattr(args, "resume", None),
            grace_period=getattr(args, "grace_period", None),
            hang_after=_float_or_none(pick("hang_after", None)),
            options=extra,
            tensorboard=_given(args, conf, "tensorboard"),
            mlflow=_given(args, conf, "mlflow"),
            post_mortem=bool(getattr(args, "post_mortem", False) or conf.get("post_mortem")),
            where_locals=bool(getattr(args, "where_locals", False)),
            autolog=_autolog(args, conf),
        )
    )
    return spec


def _autolog(args: argparse.Namespace, conf: dict[str, Any]) -> str:
    """``--no-autolog`` wins over ``--autolog LIBS``, which wins over the configured default."""
    given = getattr(args, "autolog", None)
    if getattr(args, "no_autolog", False):
        if given is not None:
            raise SpecError("--no-autolog and --autolog contradict each other; give one")
        return "off"
    return autolog_value(given if given is not None else conf.get("autolog", "all"))


def _given(args: argparse.Namespace, conf: dict[str, Any], key: str) -> str | None:
    """A text option: as given (even empty, which the spec refuses), else configured, else None."""
    value = getattr(args, key, None)
    if value is None:
        value = conf.get(key) or None  # an empty configured value means unset
    return None if value is None else str(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _check_declared(backend: str, extra: tuple[tuple[str, str], ...]) -> None:
    """Options another backend declares, given to ``backend``: name the fix."""
    mine = {option.key for option in backend_class(backend).options}
    declared = declared_options()
    foreign = sorted({key for key, _ in extra if key not in mine})
    if not foreign:
        return
    owners = sorted({declared[key][0] for key in foreign})
    flags = ", ".join("--" + k.replace("_", "-") for k in foreign)
    owner = " or ".join(owners)
    raise SpecError(
        f"{owner.capitalize()}-only option(s) {flags} given without --backend {owner}; remove "
        f"them to run on the {backend} backend, or add --backend {owner}"
    )


def _check_framework(
    args: argparse.Namespace,
    backend: str,
    extra: tuple[tuple[str, str], ...],
    fw: frameworks.Framework,
) -> None:
    """Options that cannot run a job of ``fw`` here; the message says what to change."""
    caps = backend_class(backend).capabilities
    if not caps.restarts(fw.name) and int(getattr(args, "max_restarts", 0) or 0):
        restarting = [n for n in names() if backend_class(n).capabilities.restarts(fw.name)]
        backends = " or ".join(restarting) or "one that restarts failed workers"
        fix = f"--backend {backends} (it restarts failed pods)"
        raise SpecError(
            f"--max-restarts with --framework {fw.name} needs {fix}; on the {backend} backend "
            f"a {fw.title} job runs once: remove --max-restarts"
        )
    if not fw.elastic and any(key == "elastic" for key, _ in extra):
        raise SpecError(
            f"--elastic is a PyTorch (torchrun) option; {fw.title} jobs have a fixed number "
            f"of workers: remove --elastic or use --framework {frameworks.names()[0]}"
        )
    if caps.remote_workers and any(key == "image" for key, _ in extra):
        return  # the image brings the framework; the notebook need not have it
    if importlib.util.find_spec(fw.package) is None:
        where = "to pick the matching image" if caps.remote_workers else "to run the workers"
        raise SpecError(
            f"--framework {fw.name} needs {fw.title} in this environment {where}: {fw.install}"
            + (f", or pass --image with a {fw.title} image" if caps.remote_workers else "")
        )
