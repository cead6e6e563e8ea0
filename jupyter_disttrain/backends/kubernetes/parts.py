"""The typed parts of the Kubernetes options: volumes, tolerations, elastic ranges, requirements.

Pure: each part checks itself on construction and raises an
:class:`~.syntax.OptionValueError` naming the fix.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Final

from ...spec import MAX_NODES
from .syntax import (
    RESERVED_MOUNTS,
    TAINT_EFFECTS,
    bad_value,
    is_dns_subdomain,
    is_label_key,
    is_label_value,
)


@dataclass(frozen=True)
class Volume:
    """A PersistentVolumeClaim mounted at ``path`` in every pod."""

    claim: str
    path: str
    read_only: bool = False

    def __post_init__(self) -> None:
        text = f"{self.claim}:{self.path}"
        if not is_dns_subdomain(self.claim):
            raise bad_value(
                "volume",
                text,
                f"names claim {self.claim!r}, which is not a valid "
                "PersistentVolumeClaim name (lowercase letters, digits, '-' and '.')",
            )
        check_mount_path("volume", text, self.path)


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
            raise bad_value("toleration", text, f"has taint key {self.key!r}, which is not valid")
        if not is_label_value(self.value) or (self.exists and self.value):
            raise bad_value(
                "toleration", text, f"has taint value {self.value!r}, which is not valid"
            )
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise bad_value(
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
            raise bad_value(
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
        raise bad_value(
            "pip",
            spec,
            "is not a plain requirement",
            "write NAME, NAME[EXTRA] or NAME with version specifiers, without spaces, "
            "e.g. --pip einops==0.8.0 or --pip 'timm>=1,<2'; for URLs, markers or pip "
            "options build an image and pass --image",
        )


#: URL schemes ``--data`` copies from (anything else must be an absolute path on a --volume).
DATA_SCHEMES: Final = ("s3", "gs", "gcs", "https", "http")


@dataclass(frozen=True)
class DataSource:
    """``--data SRC:/path[:ro]``: ``src`` staged into ``path`` before training starts."""

    src: str
    path: str
    read_only: bool = False

    def __post_init__(self) -> None:
        text = f"{self.src}:{self.path}"
        scheme = self.src.partition("://")[0].lower() if "://" in self.src else ""
        if scheme and (scheme not in DATA_SCHEMES or not self.src.partition("://")[2]):
            raise bad_value(
                "data",
                text,
                f"copies from {self.src!r}",
                f"use {', '.join(s + '://' for s in DATA_SCHEMES)} or a path on a --volume",
            )
        if not scheme and (not self.src.startswith("/") or posixpath.normpath(self.src) == "/"):
            raise bad_value(
                "data",
                text,
                f"copies from {self.src!r}, which is neither a URL nor an absolute path",
                "e.g. --data s3://bucket/dataset:/data",
            )
        check_mount_path("data", text, self.path)

    @property
    def is_url(self) -> bool:
        """True for a URL, False for a path on a volume."""
        return "://" in self.src


def check_mount_path(key: str, text: str, path: str) -> None:
    """Raise unless ``path`` is an absolute, normalised directory outside this tool's own."""
    if not path.startswith("/") or path == "/" or ":" in path or posixpath.normpath(path) != path:
        raise bad_value(
            key,
            text,
            f"mounts at {path!r}; the mount path must be an absolute, "
            "normalised directory other than /",
        )
    for reserved in RESERVED_MOUNTS:
        if path == reserved or path.startswith(reserved + "/"):
            raise bad_value(
                key,
                text,
                f"mounts over {reserved}, which this tool uses",
                "choose another directory, e.g. /data",
            )
