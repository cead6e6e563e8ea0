"""The record of a failed job's logs: a ConfigMap it owns (pure; no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .template import labels, owner_reference

#: What one kept-logs ConfigMap holds at most (the API server's limit is 1 MiB).
KEPT_LOGS_BYTES: Final = 900 * 1024


def logs_name(job: str) -> str:
    """The ConfigMap that keeps a failed job's logs once its pods are gone."""
    return f"{job}-logs"


def kept_logs(job: str, texts: Mapping[str, str], owner: Mapping[str, Any]) -> dict[str, Any]:
    """A ConfigMap owned by the job with each pod's log (the ends kept when too large).

    Failing pods come first in ``texts`` and keep more of their log: each pod gets
    an equal share of :data:`KEPT_LOGS_BYTES`, what a short log leaves unused
    going to the pods after it.
    """
    data: dict[str, str] = {}
    left = KEPT_LOGS_BYTES
    pods = list(texts.items())
    for i, (pod, text) in enumerate(pods):
        share = left // (len(pods) - i)
        raw = text.encode("utf-8", "replace")
        if len(raw) > share:
            raw = raw[-share:]
            text = "[earlier lines not kept]\n" + raw.decode("utf-8", "replace").split("\n", 1)[-1]
        data[pod] = text
        left -= len(text.encode("utf-8", "replace"))
    meta = {
        "name": logs_name(job),
        "labels": labels(job),
        "ownerReferences": [owner_reference(owner)],
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
