"""Which stock image runs a job: the notebook's framework version, CUDA or CPU.

Pure but for reading the notebook's own package versions. A cluster can pass
its own :class:`ImagePolicy`. Each framework names its stock image
(:class:`~...frameworks.Framework`); the policy holds a site's own templates
and the CUDA tags.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ...frameworks import Framework, framework
from .syntax import OptionError

# --- Default images ------------------------------------------------------------------------


class ImageError(OptionError):
    """No default image can be chosen; the message says which ``--image`` to pass."""


_RELEASE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?:\+[\w.]+)?$")


@dataclass(frozen=True)
class ImagePolicy:
    """How the default image follows the notebook's versions.

    Each framework names its stock image (:attr:`~...frameworks.Framework.image`
    and ``gpu_image``): :meth:`str.format` templates with the fields ``python``
    (``3.11``) and the framework's package (``torch``, ``tensorflow``: its
    release version, e.g. ``2.5.1``; a local suffix such as ``+cpu`` is
    dropped), and ``cuda`` for a framework with a ``cuda_tag``: the tag from
    ``cuda_tags`` for the newest entry not newer than its version. A site with
    its own images replaces templates in ``templates``, by framework name
    (``NAME-gpu`` for pods with GPUs).
    """

    templates: Mapping[str, str] = field(default_factory=dict)
    cuda_tags: tuple[tuple[tuple[int, int], str], ...] = (
        ((2, 0), "11.7-cudnn8"),
        ((2, 1), "12.1-cudnn8"),
        ((2, 4), "12.4-cudnn9"),
        ((2, 7), "12.8-cudnn9"),
    )

    def template(self, fw: Framework, gpus: bool) -> str:
        """The image template of ``fw`` for a pod with or without GPUs."""
        if gpus:
            site = self.templates.get(f"{fw.name}-gpu") or self.templates.get(fw.name)
            return site or fw.gpu_image or fw.image
        return self.templates.get(fw.name) or fw.image


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


def notebook_versions(framework_name: str) -> dict[str, str]:
    """Versions the payload was made with (they pick the default image of the framework)."""
    out = {"python": platform.python_version()}
    fw = framework(framework_name)
    version = fw.notebook_version()
    if version:
        out[fw.package] = version
    return out


def default_image(
    framework_name: str,
    versions: Mapping[str, str],
    *,
    gpus: int = 0,
    policy: ImagePolicy = STOCK_IMAGES,
) -> str:
    """The image for the framework matching ``versions`` (``python``, its package's).

    Raises :class:`ImageError` when the version is missing, a pre-release, or
    older than every CUDA tag of the policy, or the framework names no image.
    """
    fw = framework(framework_name)
    template = policy.template(fw, bool(gpus))
    if not template:
        raise ImageError(f"{fw.title} names no stock image; pass --image")
    python = ".".join(versions.get("python", "").split(".")[:2])
    release, minor = _release(fw.package, versions.get(fw.package))
    fields = {fw.package: release, "python": python}
    if fw.cuda_tag:
        cuda = [tag for since, tag in policy.cuda_tags if since <= minor]
        if not cuda:
            raise ImageError(
                f"no stock image is listed for {fw.package} {release}; pass --image "
                f"with an image that has this {fw.package} and the notebook's Python"
            )
        fields["cuda"] = cuda[-1]
    return template.format(**fields)
