"""Kubernetes options of a job: ``JobSpec.options`` parsed into :class:`K8sOptions`.

Pure: no I/O. ``JobSpec.options`` carries ``(key, value)`` strings; keys are
the option names below, with ``-`` or ``_`` (``node-selector`` is
``node_selector``). ``volume``, ``node_selector``, ``toleration``, ``pip`` and
``nccl`` may be given more than once; every other key once. Every problem
raises an :class:`OptionError` (a :class:`~jupyter_disttrain.spec.SpecError`)
whose message names the option, what is wrong and what to write instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final

from . import kinds
from .parts import DataSource, Elastic, Toleration, Volume, check_pip_spec
from .syntax import (
    DEFAULT_METRICS_PORT,
    DEFAULT_RUNTIME,
    EXAMPLES,
    IMAGE_REF,
    NCCL_PRESETS,
    RESERVED_MOUNTS,
    RUNTIME_ROOT,
    SCHEDULERS,
    SHM_PATH,
    TAINT_EFFECTS,
    ConflictingOptionsError,
    OptionError,
    OptionValueError,
    RepeatedOptionError,
    UnknownOptionError,
    bad_value,
    check_cpu,
    check_memory,
    flag,
    is_dns_label,
    is_dns_subdomain,
    is_label_key,
    is_label_value,
)

__all__ = [
    "DEFAULT_METRICS_PORT",
    "DEFAULT_RUNTIME",
    "EXAMPLES",
    "NCCL_PRESETS",
    "OPTIONAL_VALUE",
    "OPTION_KEYS",
    "REPEATABLE",
    "RESERVED_MOUNTS",
    "RUNTIME_ROOT",
    "SCHEDULERS",
    "SHM_PATH",
    "SWITCHES",
    "ConflictingOptionsError",
    "DataSource",
    "Elastic",
    "K8sOptions",
    "OptionError",
    "OptionValueError",
    "RepeatedOptionError",
    "Toleration",
    "UnknownOptionError",
    "Volume",
    "check_pip_spec",
    "flag",
    "is_dns_label",
    "is_dns_subdomain",
    "is_label_key",
    "is_label_value",
    "parse_options",
]

REPEATABLE: Final = frozenset({"nccl", "volume", "node_selector", "toleration", "pip", "data"})
#: Options that take no value.
SWITCHES: Final = frozenset({"payload_secret", "host_network"})
#: Options that may be given alone (``--prometheus``) or with a value (``--prometheus 8000``).
OPTIONAL_VALUE: Final = frozenset({"prometheus"})
OPTION_KEYS: Final = tuple(EXAMPLES)


# --- The options ---------------------------------------------------------------------------


@dataclass(frozen=True)
class K8sOptions:
    """Kubernetes settings of one job, validated on construction.

    ``image`` None means the stock image matching the notebook's versions;
    ``cpu``/``memory`` are requests and limits of each pod's training
    container; ``shm`` mounts a memory-backed ``/dev/shm`` (``shm_size`` its
    limit, None for none); ``queue`` is the Kueue queue, or the Volcano queue
    with ``scheduler="volcano"``; ``namespace`` None means the context's;
    ``payload_secret`` is kept for old option lists: the backend always ships the
    payload in a Secret, since it carries the job key.
    """

    image: str | None = None
    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    shm: bool = True
    shm_size: str | None = None
    nccl: tuple[str, ...] = ()
    volumes: tuple[Volume, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    scheduler: str = "default"
    priority_class: str | None = None
    queue: str | None = None
    service_account: str | None = None
    image_pull_secret: str | None = None
    pip: tuple[str, ...] = ()
    namespace: str | None = None
    context: str | None = None
    payload_secret: bool = False
    elastic: Elastic | None = None
    kubeflow_api: str | None = None
    runtime: str = DEFAULT_RUNTIME
    runai_project: str | None = None
    gpu_fraction: float | None = None
    host_network: bool = False
    data: tuple[DataSource, ...] = ()
    data_image: str | None = None
    prometheus: int | None = None

    def __post_init__(self) -> None:
        for key, image in (("image", self.image), ("data_image", self.data_image)):
            if image is not None and not IMAGE_REF.match(image):
                raise bad_value(key, image, "is not an image reference")
        if isinstance(self.gpus, bool) or self.gpus < 0:
            raise bad_value("gpus", self.gpus, "must be a whole number of GPUs per node, 0 or more")
        if self.cpu is not None:
            check_cpu("cpu", self.cpu)
        if self.memory is not None:
            check_memory("memory", self.memory)
        if self.shm_size is not None:
            check_memory("shm", self.shm_size)
        self._check_names()
        self._check_lists()

    def _check_names(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise bad_value(
                "scheduler",
                self.scheduler,
                "is not supported",
                f"use one of {', '.join(SCHEDULERS)}",
            )
        subdomains = {
            "priority_class": self.priority_class,
            "service_account": self.service_account,
            "image_pull_secret": self.image_pull_secret,
        }
        for key, value in subdomains.items():
            if value is not None and not is_dns_subdomain(value):
                raise bad_value(
                    key,
                    value,
                    "is not a valid object name",
                    "use lowercase letters, digits, '-' and '.'",
                )
        project = self.runai_project
        checks: tuple[tuple[bool, str, object, str, str], ...] = (
            (self.kubeflow_api is not None and kinds.by_api(self.kubeflow_api) is None,
             "kubeflow_api", self.kubeflow_api, "is not a Kubeflow API this tool creates",
             f"use one of {', '.join(kinds.apis())}"),
            (project is not None and not is_dns_label(f"runai-{project}"), "runai_project",
             project, "is not a Run:ai project name", "use lowercase letters, digits and '-'"),
            (project is not None and self.namespace not in (None, f"runai-{project}"),
             "namespace", self.namespace, f"is not project {project}'s namespace",
             f"Run:ai runs it in runai-{project}: drop --namespace"),
            (project is not None and self.scheduler != "default", "scheduler", self.scheduler,
             "conflicts with --runai-project", "Run:ai uses runai-scheduler: drop --scheduler"),
            (self.gpu_fraction is not None and project is None, "gpu_fraction",
             self.gpu_fraction, "needs --runai-project", "add --runai-project NAME"),
            (self.gpu_fraction is not None and (not 0 < self.gpu_fraction < 1 or self.gpus > 0),
             "gpu_fraction", self.gpu_fraction, "must be between 0 and 1, without --gpus",
             "use --gpu-fraction 0.5 for half a GPU, or --gpus N for whole ones"),
        )  # fmt: skip
        for failed, option, given, problem, fix in checks:
            if failed:
                raise bad_value(option, given, problem, fix)
        if not is_dns_subdomain(self.runtime):
            raise bad_value("runtime", self.runtime, "is not a valid object name",
                       "name a training runtime, e.g. torch-distributed")  # fmt: skip
        for key, value in {"queue": self.queue, "namespace": self.namespace}.items():
            if value is not None and not is_dns_label(value):
                raise bad_value(
                    key,
                    value,
                    "is not a valid name",
                    "use at most 63 lowercase letters, digits and '-'",
                )
        if self.context is not None and (
            not self.context
            or self.context.strip() != self.context
            or not self.context.isprintable()
        ):
            raise bad_value(
                "context",
                self.context,
                "is not a context name",
                "see `kubectl config get-contexts`",
            )

    def _check_lists(self) -> None:
        for preset in self.nccl:
            if preset not in NCCL_PRESETS:
                raise bad_value(
                    "nccl", preset, "is not a preset", f"use one of {', '.join(NCCL_PRESETS)}"
                )
        if {"ib", "socket"} <= set(self.nccl):
            raise ConflictingOptionsError(
                "--nccl ib and --nccl socket contradict each other (InfiniBand on or off); "
                "keep one of them"
            )
        paths = [v.path for v in self.volumes]
        for path in paths:
            if paths.count(path) > 1:
                raise ConflictingOptionsError(
                    f"two --volume options mount at {path}; give each volume its own directory"
                )
        keys = [k for k, _ in self.node_selector]
        for key, value in self.node_selector:
            if not is_label_key(key) or not is_label_value(value):
                raise bad_value("node_selector", f"{key}={value}", "is not a valid label")
            if keys.count(key) > 1:
                raise ConflictingOptionsError(
                    f"--node-selector gives {key} twice; a node has one value per label"
                )
        for spec in self.pip:
            check_pip_spec(spec)
        self._check_data()
        port = self.prometheus
        taken = sorted({k.port for k in kinds.KINDS})  # the training containers' own ports
        if port is not None and (not 0 < port < 65536 or port in taken):
            others = f"{', '.join(map(str, taken[:-1]))} and {taken[-1]}"
            fix = f"use a port in 1024-65535 other than {others}"
            raise bad_value("prometheus", port, "is not a free port for the metrics", fix)

    def _check_data(self) -> None:
        dests = [d.path for d in self.data]
        for source in self.data:
            text = f"{source.src}:{source.path}"
            if dests.count(source.path) > 1:
                raise ConflictingOptionsError(
                    f"two --data options stage into {source.path}; give each its own directory"
                )
            if not source.is_url and self.volume_at(source.src) is None:
                raise ConflictingOptionsError(
                    f"--data {text}: {source.src} is a path inside the pods, but no --volume is "
                    "mounted there; add --volume CLAIM:/path for the claim that holds it, or "
                    "copy from a URL (s3://, gs://, https://)"
                )
            claim = self.volume_at(source.path)
            if claim is not None and claim.read_only:
                raise ConflictingOptionsError(
                    f"--data {text} stages into the read-only --volume {claim.claim}:"
                    f"{claim.path}; mount it writable (drop :ro) or stage elsewhere"
                )
        if self.data_image is not None and not self.data:
            raise ConflictingOptionsError("--data-image runs the --data copier; add --data or "
                                          "remove --data-image")  # fmt: skip

    def volume_at(self, path: str) -> Volume | None:
        """The --volume mounted at or above ``path``, if any."""
        for volume in self.volumes:
            if path == volume.path or path.startswith(volume.path + "/"):
                return volume
        return None

    def nccl_env(self) -> dict[str, str]:
        """The environment the NCCL presets set, in the order given."""
        env: dict[str, str] = {}
        for preset in self.nccl:
            env.update(NCCL_PRESETS[preset])
        return env


# --- Parsing ------------------------------------------------------------------------------


def _norm(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_").lower()


def _int(key: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise bad_value(key, text, "is not a whole number") from None


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise bad_value("gpu_fraction", text, "is not a number") from None


def _bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("", "1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise bad_value(key, text, "is not true or false", "write true or false")


def _shm(text: str) -> tuple[bool, str | None]:
    if text.strip().lower() in ("0", "none", "off", "false", "no"):
        return False, None
    return True, text


def _elastic(text: str) -> Elastic:
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise bad_value("elastic", text, "is not MIN:MAX")
    return Elastic(int(low), int(high))


def _volume(text: str) -> Volume:
    claim, sep, rest = text.partition(":")
    read_only = False
    for mode, flag_value in ((":ro", True), (":rw", False)):
        if rest.endswith(mode):
            rest, read_only = rest[: -len(mode)], flag_value
    if not sep or not rest:
        raise bad_value("volume", text, "is not CLAIM:/path")
    return Volume(claim.strip(), rest.strip(), read_only)


def _toleration(text: str) -> Toleration:
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    effect = {e.lower(): e for e in TAINT_EFFECTS}.get(effect.strip().lower(), effect.strip())
    key, sep, value = spec.partition("=")
    return Toleration(key.strip(), value.strip(), effect, exists=not sep)


def _data(text: str) -> DataSource:
    rest, read_only = text, False
    for mode, flag_value in ((":ro", True), (":rw", False)):
        if rest.endswith(mode):
            rest, read_only = rest[: -len(mode)], flag_value
    scheme, found, after = rest.partition("://")
    prefix, rest = (scheme + found, after) if found else ("", rest)
    src, sep, path = rest.rpartition(":")
    if not sep or not src or not path.startswith("/"):
        raise bad_value("data", text, "is not SRC:/path")
    return DataSource((prefix + src).strip(), path.strip(), read_only)


def _port(text: str) -> int:
    if text.strip().lower() in ("", "true", "on", "yes"):
        return DEFAULT_METRICS_PORT
    return _int("prometheus", text)


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise bad_value("node_selector", text, "is not KEY=VALUE")
    return key.strip(), value.strip()


def _unknown(key: str) -> UnknownOptionError:
    close = difflib.get_close_matches(key, OPTION_KEYS, n=1)
    hint = f"did you mean {flag(close[0])}? " if close else ""
    return UnknownOptionError(
        f"unknown Kubernetes option {flag(key)}; {hint}known options: "
        + ", ".join(flag(k) for k in OPTION_KEYS)
    )


def parse_options(
    options: Iterable[tuple[str, str]], *, ignore: Collection[str] = ()
) -> K8sOptions:
    """``JobSpec.options`` -> validated :class:`K8sOptions`.

    Keys in ``ignore`` (options of other backends) are skipped; any other
    unknown key raises :class:`UnknownOptionError`.
    """
    skip = {_norm(k) for k in ignore}
    one: dict[str, str] = {}
    many: dict[str, list[str]] = {k: [] for k in REPEATABLE}
    for raw_key, raw_value in options:
        key, value = _norm(raw_key), raw_value.strip()
        if key in skip:
            continue
        if key not in EXAMPLES:
            raise _unknown(key)
        if not value and key not in ("payload_secret", *OPTIONAL_VALUE):
            raise OptionValueError(f"{flag(key)} needs a value, e.g. {EXAMPLES[key]}")
        if key in REPEATABLE:
            many[key].append(value)
        elif key in one:
            raise RepeatedOptionError(
                f"{flag(key)} is given twice ({one[key]!r} and {value!r}); keep one"
            )
        else:
            one[key] = value
    shm, shm_size = _shm(one["shm"]) if "shm" in one else (True, None)
    nccl = [p.strip().lower() for item in many["nccl"] for p in item.split(",") if p.strip()]
    return K8sOptions(
        image=one.get("image"),
        gpus=_int("gpus", one["gpus"]) if "gpus" in one else 0,
        cpu=one.get("cpu"),
        memory=one.get("memory"),
        shm=shm,
        shm_size=shm_size,
        nccl=tuple(dict.fromkeys(nccl)),
        volumes=tuple(_volume(v) for v in many["volume"]),
        node_selector=tuple(_label(v) for v in many["node_selector"]),
        tolerations=tuple(_toleration(v) for v in many["toleration"]),
        scheduler=one.get("scheduler", "default").lower(),
        priority_class=one.get("priority_class"),
        queue=one.get("queue"),
        service_account=one.get("service_account"),
        image_pull_secret=one.get("image_pull_secret"),
        pip=tuple(many["pip"]),
        namespace=one.get("namespace")
        or (f"runai-{one['runai_project']}" if "runai_project" in one else None),
        context=one.get("context"),
        payload_secret="payload_secret" in one and _bool("payload_secret", one["payload_secret"]),
        elastic=_elastic(one["elastic"]) if "elastic" in one else None,
        kubeflow_api=one["kubeflow_api"].lower() if "kubeflow_api" in one else None,
        runtime=one.get("runtime", DEFAULT_RUNTIME),
        runai_project=one.get("runai_project"),
        gpu_fraction=_fraction(one["gpu_fraction"]) if "gpu_fraction" in one else None,
        host_network="host_network" in one and _bool("host_network", one["host_network"]),
        data=tuple(_data(v) for v in many["data"]),
        data_image=one.get("data_image"),
        prometheus=_port(one["prometheus"]) if "prometheus" in one else None,
    )
