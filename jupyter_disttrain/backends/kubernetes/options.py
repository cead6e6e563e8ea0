"""Kubernetes options of a job: ``JobSpec.options`` parsed into :class:`K8sOptions`.

Pure: no I/O, and nothing of the Kubeflow kinds (:mod:`.option_parsing` reads the
strings and checks them against the kinds). ``JobSpec.options`` carries
``(key, value)`` strings; keys are the option names below, with ``-`` or ``_``
(``node-selector`` is ``node_selector``). ``volume``, ``node_selector``,
``toleration``, ``pip`` and ``nccl`` may be given more than once; every other key
once. Every problem raises an :class:`OptionError` (a
:class:`~jupyter_disttrain.spec.SpecError`) whose message names the option, what is
wrong and what to write instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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
            (
                project is not None and not is_dns_label(f"runai-{project}"),
                "runai_project",
                project,
                "is not a Run:ai project name",
                "use lowercase letters, digits and '-'",
            ),
            (
                project is not None and self.namespace not in (None, f"runai-{project}"),
                "namespace",
                self.namespace,
                f"is not project {project}'s namespace",
                f"Run:ai runs it in runai-{project}: drop --namespace",
            ),
            (
                project is not None and self.scheduler != "default",
                "scheduler",
                self.scheduler,
                "conflicts with --runai-project",
                "Run:ai uses runai-scheduler: drop --scheduler",
            ),
            (
                self.gpu_fraction is not None and project is None,
                "gpu_fraction",
                self.gpu_fraction,
                "needs --runai-project",
                "add --runai-project NAME",
            ),
            (
                self.gpu_fraction is not None and (not 0 < self.gpu_fraction < 1 or self.gpus > 0),
                "gpu_fraction",
                self.gpu_fraction,
                "must be between 0 and 1, without --gpus",
                "use --gpu-fraction 0.5 for half a GPU, or --gpus N for whole ones",
            ),
        )
        for failed, option, given, problem, fix in checks:
            if failed:
                raise bad_value(option, given, problem, fix)
        if not is_dns_subdomain(self.runtime):
            raise bad_value(
                "runtime",
                self.runtime,
                "is not a valid object name",
                "name a training runtime, e.g. torch-distributed",
            )
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
        if port is not None and not 0 < port < 65536:
            fix = "use a port in 1024-65535"
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
            raise ConflictingOptionsError(
                "--data-image runs the --data copier; add --data or remove --data-image"
            )

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
