"""The job options, defined once for the ``%%distrain`` magic and the ``disttrain`` command.

:data:`JOB_OPTIONS` is a list of argparse ``(flags, kwargs)``;
:func:`spec_from_args` turns parsed options into a validated
:class:`~jupyter_disttrain.spec.JobSpec`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import secrets
from typing import Any

from .backends.k8s_options import EXAMPLES as K8S_EXAMPLES
from .backends.k8s_options import REPEATABLE as K8S_REPEATABLE
from .spec import BACKENDS, DIST_BACKENDS, FRAMEWORKS, JobSpec, SpecError, parse_env, validate

Option = tuple[tuple[str, ...], dict[str, Any]]

#: Defaults of ``None`` are filled from configuration (see :func:`spec_from_args`).
JOB_OPTIONS: list[Option] = [
    (("--nodes",), {"type": int, "default": None, "metavar": "N",
                    "help": "number of nodes (torchrun agents); default 1"}),
    (("--nproc",), {"type": int, "default": None, "metavar": "M",
                    "help": "worker processes per node; default 1"}),
    (("--backend",), {"default": None, "metavar": "NAME",
                      "help": f"where to run: {', '.join(BACKENDS)}; default local"}),
    (("--name",), {"default": None,
                   "help": "job name (lowercase, digits, '-'); default generated"}),
    (("--env",), {"action": "append", "default": [], "metavar": "K=V",
                  "help": "environment variable for every worker (repeatable)"}),
    (("--timeout",), {"type": float, "default": None, "metavar": "SECONDS",
                      "help": "stop the job if it runs longer than this"}),
    (("--framework",), {"default": None, "metavar": "NAME",
                        "help": f"{' or '.join(FRAMEWORKS)}; default pytorch"}),
    (("--dist-backend",), {"default": "auto", "metavar": "NAME",
                           "help": f"process group backend: {', '.join(DIST_BACKENDS)}; auto "
                           "picks nccl with CUDA, else gloo"}),
    (("--max-restarts",), {"type": int, "default": 0, "metavar": "N",
                           "help": "restart all workers up to N times after a failure"}),
    (("--checkpoint-dir",), {"default": None, "metavar": "URI",
                             "help": "where save_checkpoint() writes: a path or fsspec URL "
                             "(s3://...); local default: the job directory"}),
    (("--resume",), {"default": None, "metavar": "latest|STEP|URI",
                     "help": "load_checkpoint() returns this checkpoint when the job starts"}),
    (("--dry-run",), {"action": "store_true",
                      "help": "print the exact launch plan (or Kubernetes YAML) and run nothing"}),
    (("--export",), {"default": None, "metavar": "FILE.yaml",
                     "help": "kubernetes: write the objects as YAML for kubectl and run nothing"}),
]  # fmt: skip


def _k8s_option(key: str) -> Option:
    flag = "--" + key.replace("_", "-")
    help_text = f"kubernetes: e.g. {K8S_EXAMPLES[key]}"
    if key == "payload_secret":
        return (flag,), {"action": "store_true", "help": help_text}
    if key in K8S_REPEATABLE:
        return (flag,), {"action": "append", "default": [], "metavar": "VALUE",
                         "help": help_text + " (repeatable)"}  # fmt: skip
    return (flag,), {"default": None, "metavar": "VALUE", "help": help_text}


#: Options of the Kubernetes backend, carried in ``JobSpec.options``.
K8S_OPTIONS: list[Option] = [_k8s_option(key) for key in K8S_EXAMPLES]
JOB_OPTIONS.extend(K8S_OPTIONS)


def backend_options(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """The backend-specific options given, as ``(key, value)`` pairs."""
    out: list[tuple[str, str]] = []
    for key in K8S_EXAMPLES:
        value = getattr(args, key, None)
        if key in K8S_REPEATABLE:
            out.extend((key, str(v)) for v in value or [])
        elif key == "payload_secret":
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
    backend = str(pick("backend", "local"))
    extra = backend_options(args)
    if extra and backend != "kubernetes":
        flags = ", ".join(sorted({"--" + k.replace("_", "-") for k, _ in extra}))
        raise SpecError(
            f"Kubernetes-only option(s) {flags} given without --backend kubernetes; remove "
            "them to run locally, or add --backend kubernetes"
        )
    if getattr(args, "export", None) and backend != "kubernetes":
        raise SpecError("--export writes Kubernetes YAML; add --backend kubernetes")
    framework = str(pick("framework", "pytorch")).lower()
    if framework == "tensorflow":
        _check_tensorflow(args, backend, extra)
    spec = validate(
        JobSpec(
            name=args.name or default_name(),
            nodes=int(pick("nodes", 1)),
            nproc=int(pick("nproc", 1)),
            backend=backend,
            framework=framework,  # type: ignore[arg-type]
            dist_backend=str(args.dist_backend).lower(),  # type: ignore[arg-type]
            env=parse_env(list(args.env or [])),
            timeout=float(timeout) if timeout is not None else None,
            max_restarts=int(args.max_restarts),
            checkpoint_dir=getattr(args, "checkpoint_dir", None),
            resume=getattr(args, "resume", None),
            options=extra,
        )
    )
    from .checkpoints import preflight  # checks the directory and the resume target

    return preflight(spec)


def _check_tensorflow(
    args: argparse.Namespace, backend: str, extra: tuple[tuple[str, str], ...]
) -> None:
    """Options that cannot run a TensorFlow job here; the message says what to change."""
    if backend == "local" and int(getattr(args, "max_restarts", 0) or 0) > 0:
        raise SpecError(
            "--max-restarts with --framework tensorflow needs --backend kubernetes (the TFJob "
            "restarts failed pods); locally a TensorFlow job runs once: remove --max-restarts"
        )
    if any(key == "elastic" for key, _ in extra):
        raise SpecError(
            "--elastic is a PyTorch (torchrun) option; TensorFlow jobs have a fixed number "
            "of workers: remove --elastic or use --framework pytorch"
        )
    if backend == "kubernetes" and any(key == "image" for key, _ in extra):
        return  # the image brings TensorFlow; the notebook need not have it
    if importlib.util.find_spec("tensorflow") is None:
        where = "to run the workers" if backend == "local" else "to pick the matching image"
        raise SpecError(
            f"--framework tensorflow needs TensorFlow in this environment {where}: "
            "pip install 'jupyter_disttrain[tensorflow]' (installs tensorflow-cpu; "
            "tensorflow on a GPU machine)"
            + ("" if backend == "local" else ", or pass --image with a TensorFlow image")
        )
