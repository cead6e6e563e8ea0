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
import posixpath
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from ..spec import MAX_NODES, SpecError

#: Everything this tool mounts into a pod lives under this directory.
RUNTIME_ROOT: Final = "/opt/disttrain"
SHM_PATH: Final = "/dev/shm"
RESERVED_MOUNTS: Final = (RUNTIME_ROOT, SHM_PATH)

SCHEDULERS: Final = ("default", "volcano")
NCCL_PRESETS: Final[Mapping[str, Mapping[str, str]]] = {
    "ib": {"NCCL_IB_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_SOCKET_IFNAME": "eth0"},
    "socket": {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"},
    "debug": {"NCCL_DEBUG": "INFO"},
}
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")

#: One example per option, quoted in error messages.
EXAMPLES: Final[Mapping[str, str]] = {
    "image": "--image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    "gpus": "--gpus 8",
    "cpu": "--cpu 8 (cores) or --cpu 500m (millicores)",
    "memory": "--memory 64Gi",
    "shm": "--shm 16Gi, or --shm none to turn it off",
    "nccl": "--nccl ib, --nccl socket or --nccl debug",
    "volume": "--volume my-claim:/data (append :ro for read-only)",
    "node_selector": "--node-selector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB",
    "toleration": "--toleration nvidia.com/gpu=present:NoSchedule (or KEY:EFFECT, KEY=VALUE)",
    "scheduler": "--scheduler volcano",
    "priority_class": "--priority-class high-priority",
    "queue": "--queue team-a",
    "service_account": "--service-account trainer",
    "image_pull_secret": "--image-pull-secret regcred",
    "pip": "--pip einops==0.8.0",
    "namespace": "--namespace ml-team",
    "context": "--context gpu-cluster",
    "payload_secret": "--payload-secret",
    "elastic": "--elastic 2:4",
    "kubeflow_api": "--kubeflow-api trainjob (Kubeflow Trainer v2) or pytorchjob (Training "
    "Operator v1); default: what the cluster serves",
    "runtime": "--runtime torch-distributed (a Kubeflow Trainer training runtime)",
    "runai_project": "--runai-project team-a (Run:ai: namespace runai-team-a, its scheduler)",
    "gpu_fraction": "--gpu-fraction 0.5 (Run:ai: a share of one GPU per pod)",
    "host_network": "--host-network (pods on the node's network: RDMA NICs, no overlay)",
}
#: ``--kubeflow-api`` values.
KUBEFLOW_APIS: Final = ("trainjob", "pytorchjob")
DEFAULT_RUNTIME: Final = "torch-distributed"
REPEATABLE: Final = frozenset({"nccl", "volume", "node_selector", "toleration", "pip"})
#: Options that take no value.
SWITCHES: Final = frozenset({"payload_secret", "host_network"})
OPTION_KEYS: Final = tuple(EXAMPLES)


class OptionError(SpecError):
    """A Kubernetes option that cannot work; the message names the problem and the fix."""


class UnknownOptionError(OptionError):
    """An option the Kubernetes backend does not know."""


class RepeatedOptionError(OptionError):
    """A single-valued option given more than once."""


class OptionValueError(OptionError):
    """An option value with the wrong syntax or out of range."""


class ConflictingOptionsError(OptionError):
    """Options that cannot go together, with each other or with the job."""


def flag(key: str) -> str:
    """The command-line spelling of option ``key`` (``node_selector`` -> ``--node-selector``)."""
    return "--" + key.replace("_", "-")


def _bad(key: str, value: object, problem: str, fix: str | None = None) -> OptionValueError:
    return OptionValueError(f"{flag(key)} {value!r} {problem}; {fix or 'e.g. ' + EXAMPLES[key]}")


# --- Kubernetes name and quantity syntax ---------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_QUANTITY = re.compile(
    r"^\+?(?P<num>\d+(?:\.\d*)?|\.\d+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$"
)
_LOOSE_BYTES = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kKmMgGtTpPeE])(?P<i>[iI]?)[bB]?$")
_FACTORS: Final[Mapping[str, Decimal]] = {
    **{s: Decimal(1000) ** i for i, s in enumerate(("", "k", "M", "G", "T", "P", "E"))},
    **{s: Decimal(1000) ** -i for i, s in enumerate(("m", "u", "n"), 1)},
    **{s + "i": Decimal(1024) ** i for i, s in enumerate("KMGTPE", 1)},
}
MIB: Final = 2**20


def is_dns_label(name: str) -> bool:
    """A DNS-1123 label: namespaces, queue names (at most 63 characters)."""
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def is_dns_subdomain(name: str) -> bool:
    """A DNS-1123 subdomain: names of most objects (at most 253 characters)."""
    return 0 < len(name) <= 253 and all(_DNS_LABEL.match(part) for part in name.split("."))


def is_label_key(key: str) -> bool:
    """A label key: ``[prefix/]name`` with a DNS subdomain prefix."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_label_value(value: str) -> bool:
    """A label value: empty, or at most 63 alphanumerics, ``-``, ``_``, ``.``."""
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


def _quantity(text: str) -> tuple[Decimal, str] | None:
    """``(value, suffix)`` of a Kubernetes quantity (``"1.5Gi"`` -> bytes), or None."""
    match = _QUANTITY.match(text)
    if not match:
        return None
    number, suffix = Decimal(match["num"]), match["suffix"] or ""
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:]), suffix
    return number * _FACTORS[suffix], suffix


def check_memory(key: str, text: str) -> None:
    """Raise unless ``text`` is a byte quantity of at least 1 MiB."""
    parsed = _quantity(text)
    if parsed is None:
        loose = _LOOSE_BYTES.match(text)
        if loose is None:
            raise _bad(key, text, "is not a Kubernetes quantity")
        num, letter = loose["num"], loose["unit"].upper()
        decimal = f"{num}{'k' if letter == 'K' else letter}"
        raise _bad(
            key,
            text,
            "is not a Kubernetes quantity",
            f"write {num}{letter}i (powers of 2) or {decimal} (powers of 10)",
        )
    value, suffix = parsed
    if suffix in ("n", "u", "m"):
        raise _bad(
            key,
            text,
            f"means {value} bytes ('{suffix}' is a fraction, not mega)",
            f"write {text[:-1]}Mi or {text[:-1]}M",
        )
    if value < MIB:
        fix = f"write {text}Gi or {text}Mi" if not suffix else None
        raise _bad(key, text, f"is only {value} bytes", fix)


def check_cpu(key: str, text: str) -> None:
    """Raise unless ``text`` is a positive number of cores or millicores."""
    parsed = _quantity(text)
    if parsed is None:
        raise _bad(key, text, "is not a CPU quantity")
    value, suffix = parsed
    if suffix == "M":
        raise _bad(
            key, text, "means millions of cores", f"write {text[:-1]}m for thousandths of a core"
        )
    if suffix not in ("", "m"):
        raise _bad(key, text, "is not a CPU quantity")
    if value <= 0:
        raise _bad(key, text, "must be more than zero")


# --- Typed parts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Volume:
    """A PersistentVolumeClaim mounted at ``path`` in every pod."""

    claim: str
    path: str
    read_only: bool = False

    def __post_init__(self) -> None:
        text = f"{self.claim}:{self.path}"
        if not is_dns_subdomain(self.claim):
            raise _bad(
                "volume",
                text,
                f"names claim {self.claim!r}, which is not a valid "
                "PersistentVolumeClaim name (lowercase letters, digits, '-' and '.')",
            )
        path = self.path
        if (
            not path.startswith("/")
            or path == "/"
            or ":" in path
            or posixpath.normpath(path) != path
        ):
            raise _bad(
                "volume",
                text,
                f"mounts at {path!r}; the mount path must be an absolute, "
                "normalised directory other than /",
            )
        for reserved in RESERVED_MOUNTS:
            if path == reserved or path.startswith(reserved + "/"):
                raise _bad(
                    "volume",
                    text,
                    f"mounts over {reserved}, which this tool uses",
                    "choose another directory, e.g. /data",
                )


@dataclass(frozen=True)
class Toleration:
    """Lets pods run on nodes with a matching taint; empty ``effect`` matches all effects."""

    key: str
    value: str = ""
    effect: str = ""
    exists: bool = False

    def __post_init__(self) -> None:
        text = self.key + ("" if self.exists else f"={self.value}")
        text += f":{self.effect}" if self.effect else ""
        if not is_label_key(self.key):
            raise _bad("toleration", text, f"has taint key {self.key!r}, which is not valid")
        if not is_label_value(self.value) or (self.exists and self.value):
            raise _bad("toleration", text, f"has taint value {self.value!r}, which is not valid")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise _bad(
                "toleration",
                text,
                f"has effect {self.effect!r}",
                f"use one of {', '.join(TAINT_EFFECTS)}",
            )

    def to_dict(self) -> dict[str, str]:
        """The pod-spec form."""
        out = {"key": self.key, "operator": "Exists" if self.exists else "Equal"}
        if not self.exists:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class Elastic:
    """An elastic node range: the job runs with ``min_nodes`` to ``max_nodes`` nodes."""

    min_nodes: int
    max_nodes: int

    def __post_init__(self) -> None:
        if not 1 <= self.min_nodes <= self.max_nodes <= MAX_NODES:
            raise _bad(
                "elastic",
                f"{self.min_nodes}:{self.max_nodes}",
                f"is not a node range; need 1 <= MIN <= MAX <= {MAX_NODES}",
            )


_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_SPECIFIER = r"(?:~=|===|==|!=|<=|>=|<|>)[A-Za-z0-9_.*+!-]+"
_PIP_SPEC = re.compile(
    rf"^{_NAME}(?:\[{_NAME}(?:,{_NAME})*\])?(?:{_SPECIFIER}(?:,{_SPECIFIER})*)?$"
)
_ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2")


def check_pip_spec(spec: str) -> None:
    """Raise unless ``spec`` is a plain requirement: name, extras, version specifiers."""
    if not _PIP_SPEC.match(spec) or spec.lower().endswith(_ARCHIVES):
        raise _bad(
            "pip",
            spec,
            "is not a plain requirement",
            "write NAME, NAME[EXTRA] or NAME with version specifiers, without spaces, "
            "e.g. --pip einops==0.8.0 or --pip 'timm>=1,<2'; for URLs, markers or pip "
            "options build an image and pass --image",
        )


# --- The options ---------------------------------------------------------------------------


@dataclass(frozen=True)
class K8sOptions:
    """Kubernetes settings of one job, validated on construction.

    ``image`` None means the stock image matching the notebook's versions;
    ``cpu``/``memory`` are requests and limits of each pod's training
    container; ``shm`` mounts a memory-backed ``/dev/shm`` (``shm_size`` its
    limit, None for none); ``queue`` is the Kueue queue, or the Volcano queue
    with ``scheduler="volcano"``; ``namespace`` None means the context's;
    ``payload_secret`` ships the payload in a Secret instead of a ConfigMap.
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

    def __post_init__(self) -> None:
        if self.image is not None and not _IMAGE.match(self.image):
            raise _bad("image", self.image, "is not an image reference")
        if isinstance(self.gpus, bool) or self.gpus < 0:
            raise _bad("gpus", self.gpus, "must be a whole number of GPUs per node, 0 or more")
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
            raise _bad(
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
                raise _bad(
                    key,
                    value,
                    "is not a valid object name",
                    "use lowercase letters, digits, '-' and '.'",
                )
        project = self.runai_project
        checks: tuple[tuple[bool, str, object, str, str], ...] = (
            (self.kubeflow_api not in (None, *KUBEFLOW_APIS), "kubeflow_api", self.kubeflow_api,
             "is not a Kubeflow API this tool creates", f"use one of {', '.join(KUBEFLOW_APIS)}"),
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
                raise _bad(option, given, problem, fix)
        if not is_dns_subdomain(self.runtime):
            raise _bad("runtime", self.runtime, "is not a valid object name",
                       "name a training runtime, e.g. torch-distributed")  # fmt: skip
        for key, value in {"queue": self.queue, "namespace": self.namespace}.items():
            if value is not None and not is_dns_label(value):
                raise _bad(
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
            raise _bad(
                "context",
                self.context,
                "is not a context name",
                "see `kubectl config get-contexts`",
            )

    def _check_lists(self) -> None:
        for preset in self.nccl:
            if preset not in NCCL_PRESETS:
                raise _bad(
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
                raise _bad("node_selector", f"{key}={value}", "is not a valid label")
            if keys.count(key) > 1:
                raise ConflictingOptionsError(
                    f"--node-selector gives {key} twice; a node has one value per label"
                )
        for spec in self.pip:
            check_pip_spec(spec)

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
        raise _bad(key, text, "is not a whole number") from None


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _bad("gpu_fraction", text, "is not a number") from None


def _bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("", "1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise _bad(key, text, "is not true or false", "write true or false")


def _shm(text: str) -> tuple[bool, str | None]:
    if text.strip().lower() in ("0", "none", "off", "false", "no"):
        return False, None
    return True, text


def _elastic(text: str) -> Elastic:
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise _bad("elastic", text, "is not MIN:MAX")
    return Elastic(int(low), int(high))


def _volume(text: str) -> Volume:
    claim, sep, rest = text.partition(":")
    read_only = False
    for mode, flag_value in ((":ro", True), (":rw", False)):
        if rest.endswith(mode):
            rest, read_only = rest[: -len(mode)], flag_value
    if not sep or not rest:
        raise _bad("volume", text, "is not CLAIM:/path")
    return Volume(claim.strip(), rest.strip(), read_only)


def _toleration(text: str) -> Toleration:
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    effect = {e.lower(): e for e in TAINT_EFFECTS}.get(effect.strip().lower(), effect.strip())
    key, sep, value = spec.partition("=")
    return Toleration(key.strip(), value.strip(), effect, exists=not sep)


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise _bad("node_selector", text, "is not KEY=VALUE")
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
        if not value and key != "payload_secret":
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
    )
