"""``--data``: the pod parts that stage data before training (pure; no I/O).

Each ``--data SRC:/path`` is copied by the project's copier
(:mod:`jupyter_disttrain.runtime.stage`, shipped in the payload) into a
directory the training container mounts at ``/path``: an ``emptyDir`` of the
pod, or, when ``/path`` lies on a ``--volume``, that claim (which keeps the
files for the next job: the copier skips what is already there). A PyTorchJob
or TFJob copies in an init container ``data-stage`` (the training image, or
``--data-image``); a TrainJob cannot add an init container through Trainer
v2.3.0's runtime patches, so its training container copies first and then
execs torchrun.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from .syntax import RUNTIME_ROOT

if TYPE_CHECKING:
    from .options import K8sOptions

STAGE_MODULE: Final = "jupyter_disttrain.runtime.stage"
INIT_NAME: Final = "data-stage"
#: Where the copier pip-installs s3fs / gcsfs when the image lacks them.
STAGE_PIP_DIR: Final = f"{RUNTIME_ROOT}/stage-pip"


def staged_volume(index: int) -> str:
    """The name of the emptyDir that receives ``--data`` number ``index``."""
    return f"staged-{index}"


def stage_args(opts: K8sOptions) -> list[str]:
    """``SRC DEST`` argv pairs for the copier, in the order given."""
    return [part for source in opts.data for part in (source.src, source.path)]


def stage_command(opts: K8sOptions, then: Sequence[str] = ()) -> list[str]:
    """The copier's exec-form command; with ``then``, the command it execs afterwards."""
    command = ["python", "-m", STAGE_MODULE, *stage_args(opts)]
    return [*command, "--then", *then] if then else command


def data_volumes(
    opts: K8sOptions, *, init: bool = True
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's extra volumes and the training container's mounts for ``--data``.

    A destination on a ``--volume`` needs nothing extra (the claim is mounted
    already); any other gets an emptyDir mounted there (read-only with ``:ro``).
    ``init`` False: the training container copies (TrainJob), with no pip volume.
    """
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, source in enumerate(opts.data):
        if opts.volume_at(source.path) is not None:
            continue
        volumes.append({"name": staged_volume(index), "emptyDir": {}})
        read_only = {"readOnly": True} if source.read_only else {}
        mounts.append({"name": staged_volume(index), "mountPath": source.path, **read_only})
    if init and opts.data_image is None:  # the image may lack s3fs: the copier installs it here
        volumes.append({"name": "stage-pip", "emptyDir": {}})
    return volumes, mounts


def stage_mounts(opts: K8sOptions, payload_mount: dict[str, Any]) -> list[dict[str, Any]]:
    """What the copier mounts: the payload, every claim (sources and targets), the emptyDirs."""
    mounts = [dict(payload_mount)]
    for index, volume in enumerate(opts.volumes):
        read_only = {"readOnly": True} if volume.read_only else {}
        mounts.append({"name": f"data-{index}", "mountPath": volume.path, **read_only})
    for index, source in enumerate(opts.data):
        if opts.volume_at(source.path) is None:
            mounts.append({"name": staged_volume(index), "mountPath": source.path})
    if opts.data_image is None:
        mounts.append({"name": "stage-pip", "mountPath": STAGE_PIP_DIR})
    return mounts


def init_container(
    opts: K8sOptions,
    image: str,
    env: Sequence[dict[str, Any]],
    payload_mount: dict[str, Any],
    resources: dict[str, Any],
) -> dict[str, Any]:
    """The ``data-stage`` init container (PyTorchJob, TFJob).

    ``env`` is the user's ``--env`` plus ``PYTHONPATH`` (credentials such as
    ``AWS_ACCESS_KEY_ID`` reach the copier that way). A failed copy ends the
    container with the copier's last lines as its termination message.
    """
    full_env = [dict(e) for e in env]
    if opts.data_image is None:
        full_env.append({"name": "PYTHONUSERBASE", "value": STAGE_PIP_DIR})
    init: dict[str, Any] = {
        "name": INIT_NAME,
        "image": opts.data_image or image,
        "command": stage_command(opts),
        "env": full_env,
        "volumeMounts": stage_mounts(opts, payload_mount),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if resources:
        init["resources"] = resources
    return init
