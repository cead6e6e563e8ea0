"""Kubernetes option names, examples and errors, and the Kubernetes syntax they are checked against.

Pure: no I/O. Every problem raises an :class:`OptionError` (a
:class:`~jupyter_disttrain.spec.SpecError`) whose message names the option,
what is wrong and what to write instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Final

from ...spec import SpecError

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
    "data": "--data s3://bucket/dataset:/data (also gs://, https://, a path on a --volume; "
    "append :ro for read-only)",
    "data_image": "--data-image registry.example.com/tools/python-s3:1 (runs the --data copier; "
    "needs python with fsspec)",
    "prometheus": "--prometheus (rank 0 serves /metrics on port 9464) or --prometheus 8000",
}
#: The port ``--prometheus`` alone serves on (the OpenTelemetry Prometheus exporter's).
DEFAULT_METRICS_PORT: Final = 9464
DEFAULT_RUNTIME: Final = "torch-distributed"


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


def bad_value(key: str, value: object, problem: str, fix: str | None = None) -> OptionValueError:
    """The error for option ``key`` given ``value``: the problem, then the fix (or an example)."""
    return OptionValueError(f"{flag(key)} {value!r} {problem}; {fix or 'e.g. ' + EXAMPLES[key]}")


# --- Kubernetes name and quantity syntax ---------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
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
            raise bad_value(key, text, "is not a Kubernetes quantity")
        num, letter = loose["num"], loose["unit"].upper()
        decimal = f"{num}{'k' if letter == 'K' else letter}"
        raise bad_value(
            key,
            text,
            "is not a Kubernetes quantity",
            f"write {num}{letter}i (powers of 2) or {decimal} (powers of 10)",
        )
    value, suffix = parsed
    if suffix in ("n", "u", "m"):
        raise bad_value(
            key,
            text,
            f"means {value} bytes ('{suffix}' is a fraction, not mega)",
            f"write {text[:-1]}Mi or {text[:-1]}M",
        )
    if value < MIB:
        fix = f"write {text}Gi or {text}Mi" if not suffix else None
        raise bad_value(key, text, f"is only {value} bytes", fix)


def check_cpu(key: str, text: str) -> None:
    """Raise unless ``text`` is a positive number of cores or millicores."""
    parsed = _quantity(text)
    if parsed is None:
        raise bad_value(key, text, "is not a CPU quantity")
    value, suffix = parsed
    if suffix == "M":
        raise bad_value(
            key, text, "means millions of cores", f"write {text[:-1]}m for thousandths of a core"
        )
    if suffix not in ("", "m"):
        raise bad_value(key, text, "is not a CPU quantity")
    if value <= 0:
        raise bad_value(key, text, "must be more than zero")
