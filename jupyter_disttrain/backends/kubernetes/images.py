"""Which stock image runs a job: the notebook's framework version, CUDA or CPU.

Pure but for reading the notebook's own package versions. A cluster can pass
its own :class:`ImagePolicy`. What differs between frameworks is data
(:data:`STOCK`): the package whose version picks the image, the policy's
templates, whether a CUDA suffix is chosen.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from ...payload import package_version
from .syntax import OptionError

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


@dataclass(frozen=True)
class StockImage:
    """How one framework's stock image is named.

    ``version_key`` is the ``versions`` entry (and template field) holding the
    framework's release, read from the first installed of ``packages``;
    ``template`` picks the policy's template for a pod with or without GPUs;
    ``cuda`` fills the ``cuda`` field from :attr:`ImagePolicy.cuda_by_torch`.
    """

    version_key: str
    packages: tuple[str, ...]
    template: Callable[[ImagePolicy, bool], str]
    cuda: bool = False


#: ``--framework`` -> how its stock image is named.
STOCK: Final[Mapping[str, StockImage]] = {
    "pytorch": StockImage("torch", ("torch",), lambda policy, gpus: policy.pytorch, cuda=True),
    "tensorflow": StockImage(
        "tensorflow",
        ("tensorflow", "tensorflow-cpu"),
        lambda policy, gpus: policy.tensorflow_gpu if gpus else policy.tensorflow,
    ),
}


def notebook_versions(framework: str = "pytorch") -> dict[str, str]:
    """Versions the payload was made with (they pick the default image of ``framework``)."""
    out = {"python": platform.python_version()}
    stock = STOCK[framework]
    version = next(filter(None, map(package_version, stock.packages)), None)
    if version:
        out[stock.version_key] = version
    return out


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
    stock = STOCK[framework]
    release, minor = _release(stock.version_key, versions.get(stock.version_key))
    fields = {stock.version_key: release, "python": python}
    if stock.cuda:
        cuda = [suffix for since, suffix in policy.cuda_by_torch if since <= minor]
        if not cuda:
            raise ImageError(
                f"no stock image is listed for {stock.version_key} {release}; pass --image "
                f"with an image that has this {stock.version_key} and the notebook's Python"
            )
        fields["cuda"] = cuda[-1]
    return stock.template(policy, bool(gpus)).format(**fields)
