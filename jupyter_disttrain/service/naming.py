"""Default job names that say where a job came from: ``quickstart-c3-7f2a``, ``train-5be0``.

A name is the notebook's (or script's) stem, ``c`` and the cell's execution
count when known, and four random hex digits. It stays a valid job name
(:data:`~jupyter_disttrain.spec.NAME_RE`: an RFC 1123 / DNS-1035 label of at
most 40 characters, short enough for the pod and service names built from
it) and a directory name. Without an origin it is today's time-stamped name.
"""

from __future__ import annotations

import re
import secrets
from pathlib import PurePath

from ..options import default_name
from ..spec import NAME_RE

#: Longest job name (:data:`~jupyter_disttrain.spec.NAME_RE` allows 40 characters).
MAX_NAME = 40


def stem_of(path: str) -> str:
    """``path``'s stem as a name part: lowercase letters, digits and '-', starting with a letter.

    ``"Notebooks/01 Quick_Start.ipynb"`` gives ``"quick-start"``; a module
    ``pkg.train`` gives ``"pkg-train"``; "" when nothing usable is left.
    """
    stem = PurePath(path.replace("\\", "/")).name
    stem = stem.removesuffix(".ipynb").removesuffix(".py")
    stem = re.sub(r"[^a-z0-9]+", "-", stem.lower())
    return re.sub(r"^[^a-z]+", "", stem).strip("-")


def readable_name(origin: str | None, cell: int | None = None) -> str:
    """A fresh job name for a job from ``origin`` (a notebook or script path, or module).

    ``cell`` is the notebook cell's execution count (None for a script or
    when unknown). Falls back to :func:`~jupyter_disttrain.options.default_name`
    when ``origin`` is None or has no usable stem.
    """
    stem = stem_of(origin) if origin else ""
    if not stem:
        return default_name()
    parts = [f"c{cell}"] if cell is not None and cell >= 0 else []
    parts.append(secrets.token_hex(2))
    tail = "-" + "-".join(parts)
    stem = stem[: MAX_NAME - len(tail)].rstrip("-")
    name = f"{stem}{tail}" if stem else default_name()
    return name if NAME_RE.fullmatch(name) else default_name()
