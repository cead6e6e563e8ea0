"""The worker environment a job's spec asks for: one mapping every backend uses.

Pure: from a :class:`~..spec.JobSpec` to the ``DISTRAIN_*`` variables its
options become in every worker (the runtime reads them). Where a backend
writes values somewhere that expands ``$(VAR)`` (a pod spec), it passes
``escape``. What is a backend's own (paths, its rendezvous, its log relay)
it adds itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..spec import JobSpec

#: The process group's timeout (seconds); a user's ``--env`` of it wins.
PG_TIMEOUT = "DISTRAIN_PG_TIMEOUT"


def _same(value: str) -> str:
    return value


def spec_env(spec: JobSpec, escape: Callable[[str], str] = _same) -> dict[str, str]:
    """The variables ``spec``'s options set in every worker (``escape`` applied to the
    values a user typed: paths and URIs)."""
    env: dict[str, str] = {}
    if spec.timeout:
        env[PG_TIMEOUT] = str(max(30, math.ceil(spec.timeout)))
    if spec.resume:
        env["DISTRAIN_RESUME"] = escape(spec.resume)
    if spec.grace_period:
        env["DISTRAIN_GRACE_PERIOD"] = f"{spec.grace_period:g}"
    if spec.hang_after is not None:
        env["DISTRAIN_HANG_AFTER"] = f"{spec.hang_after:g}"
    if spec.autolog != "all":
        env["DISTRAIN_AUTOLOG"] = spec.autolog
    if spec.post_mortem:
        env["DISTRAIN_POST_MORTEM"] = "1"
    if spec.where_locals:
        env["DISTRAIN_WHERE_LOCALS"] = "1"
    return env
