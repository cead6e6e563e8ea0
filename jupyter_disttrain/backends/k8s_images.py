"""Which stock image runs a job: the notebook's framework version, CUDA or CPU.

Pure: no I/O. A cluster can pass its own :class:`ImagePolicy`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .k8s_options import OptionError

# --- Default images ------------------------------------------------------------------------


class ImageError(OptionError):
    """No default image can be chosen; the message says which ``--image`` to pass."""


_RELEASE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?:\+[\w.]+)?$")


@dataclass(frozen=True)
class ImagePolicy:
    """How the default image follows the notebook's versions.

    Templates are :meth:`str.format` strings with the fields ``torch`` or
    ``tensorflow`` (release version, e.g. ``2.5.1``; a local suffix such as
    ``+cpu`` is dropped), ``python`` (``3.11``) and, for PyTorch, ``cuda``:
    the suffix from ``cuda_by_torch`` for the newest entry not newer than the
    torch version. A site with its own images replaces the templates.
    """

    pytorch: str = "pytorch/pytorch:{torch}-cuda{cuda}-runtime"
    tensorflow: str = "tensorflow/tensorflow:{tensorflow}"
    tensorflow_gpu: str = "tensorflow/tensorflow:{tensorflow}-gpu"
    cuda_by_torch: tuple[tuple[tuple[int, int], str], ...] = (
        ((2, 0), "11.7-cudnn8"),
        ((2, 1), "12.1-cudnn8"),
        ((2, 4), "12.4-cudnn9"),
        ((2, 7), "12.8-cudnn9"),
    )


STOCK_IMAGES: Final = ImagePolicy()


def _release(name: str, version: str | None) -> tuple[str, tuple[int, int]]:
    match = _RELEASE.match(version or "")
    if match is None:
        what = f"{name} {version}" if version else f"the notebook's {name} version (unknown)"
        raise ImageError(
            f"no stock image is known for {what}; pass --image with an image that has "
            f"{name} and the notebook's Python"
        )
    major, minor = int(match["major"]), int(match["minor"])
    return f"{major}.{minor}.{match['patch'] or 0}", (major, minor)


def default_image(
    framework: str,
    versions: Mapping[str, str],
    *,
    gpus: int = 0,
    policy: ImagePolicy = STOCK_IMAGES,
) -> str:
    """The image for ``framework`` matching ``versions`` (``python``, ``torch``/``tensorflow``).

    Raises :class:`ImageError` when the version is missing, a pre-release, or
    older than every entry of the policy.
    """
    python = ".".join(versions.get("python", "").split(".")[:2])
    if framework == "tensorflow":
        release, _ = _release("tensorflow", versions.get("tensorflow"))
        template = policy.tensorflow_gpu if gpus else policy.tensorflow
        return template.format(tensorflow=release, python=python)
    release, minor = _release("torch", versions.get("torch"))
    cuda = [suffix for since, suffix in policy.cuda_by_torch if since <= minor]
    if not cuda:
        raise ImageError(
            f"no stock image is listed for torch {release}; pass --image with an image that "
            "has this torch and the notebook's Python"
        )
    return policy.pytorch.format(torch=release, cuda=cuda[-1], python=python)
