"""``JobSpec.options`` strings -> :class:`~.options.K8sOptions`, checked against the kinds.

Pure: no I/O. What needs the Kubeflow kinds this tool creates (the API a job may ask for,
the ports their training containers take) is checked here, so that :mod:`.options`, which
every kind reads, imports no kind.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from . import kinds
from .options import OPTION_KEYS, OPTIONAL_VALUE, REPEATABLE, K8sOptions
from .parts import DataSource, Elastic, Toleration, Volume
from .syntax import (
    DEFAULT_METRICS_PORT,
    DEFAULT_RUNTIME,
    EXAMPLES,
    TAINT_EFFECTS,
    OptionValueError,
    RepeatedOptionError,
    UnknownOptionError,
    bad_value,
    flag,
)


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
    """``JobSpec.options`` -> :class:`K8sOptions`, validated (:func:`check_against_kinds` too).

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
    parsed = K8sOptions(
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
    check_against_kinds(parsed)
    return parsed


def check_against_kinds(options: K8sOptions) -> None:
    """Raise an :class:`~.syntax.OptionError` when ``options`` ask for a Kubeflow API this
    tool does not create, or put the metrics on a port a training container takes."""
    api = options.kubeflow_api
    if api is not None and kinds.by_api(api) is None:
        fix = f"use one of {', '.join(kinds.apis())}"
        raise bad_value("kubeflow_api", api, "is not a Kubeflow API this tool creates", fix)
    taken = sorted({k.port for k in kinds.KINDS})  # the training containers' own ports
    if options.prometheus in taken:
        others = f"{', '.join(map(str, taken[:-1]))} and {taken[-1]}"
        fix = f"use a port in 1024-65535 other than {others}"
        raise bad_value("prometheus", options.prometheus, "is not a free port for the metrics", fix)
