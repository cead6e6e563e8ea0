"""A training script's folder in the pods: where its shipped copy is written, and runs.

A script payload (``disttrain run SCRIPT.py``) carries the script and its
modules; each rank writes them to :data:`SCRIPT_DIR`, a writable ``emptyDir``
of the pod (so a script that saves ``snapshot.pt`` beside itself can, and
finds it again after a container restart), and runs there. The runtime is
told the folder by :data:`~jupyter_disttrain.runtime.cell.SCRIPT_DIR_ENV`; a
PyTorchJob's or TFJob's container also starts in it (``workingDir``; a
TrainJob's runtime patch cannot set one, the runtime changes to it).
"""

from __future__ import annotations

from typing import Any, Final

from ...runtime.cell import SCRIPT_DIR_ENV
from .syntax import RUNTIME_ROOT

SCRIPT_DIR: Final = f"{RUNTIME_ROOT}/script"
VOLUME: Final = "script"


def add_script_dir(
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    env: list[dict[str, Any]],
    container: dict[str, Any] | None = None,
) -> None:
    """Add the script folder's volume, mount and variable; ``container`` starts in it."""
    volumes.append({"name": VOLUME, "emptyDir": {}})
    mounts.append({"name": VOLUME, "mountPath": SCRIPT_DIR})
    env.append({"name": SCRIPT_DIR_ENV, "value": SCRIPT_DIR})
    if container is not None:
        container["workingDir"] = SCRIPT_DIR
