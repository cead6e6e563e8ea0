"""Kubernetes objects as one YAML file for ``kubectl create -f`` (pure; no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from ...runtime.jobkey import KEY_FILE

#: What a printed plan shows instead of the job key (the Secret made at submit holds a fresh one).
KEY_PLACEHOLDER = "<the job key: made with the Secret when the job is submitted>"

_SERVER_FIELDS = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "ownerReferences",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def render_yaml(objs: Sequence[Mapping[str, Any]], *, show_key: bool = True) -> str:
    """``objs`` as one multi-document YAML file for ``kubectl create -f``.

    ``show_key`` False: the payload object's job key (its ``key`` entry) is
    :data:`KEY_PLACEHOLDER`, for a plan that is printed rather than submitted.

    Server-set metadata (uid, resourceVersion, ownerReferences, ...) and
    ``status`` are dropped, so the file also works for objects read back from
    a cluster. Consequently the payload object in the file has no owner and
    outlives the job; the header says how to delete both.
    """
    clean: list[dict[str, Any]] = []
    for obj in objs:
        copy: dict[str, Any] = json.loads(json.dumps(obj))
        copy.pop("status", None)
        for key in _SERVER_FIELDS:
            copy.get("metadata", {}).pop(key, None)
        if not show_key:
            for field in ("data", "binaryData"):
                if KEY_FILE in copy.get(field, {}):
                    copy[field][KEY_FILE] = KEY_PLACEHOLDER
        clean.append(copy)
    kinds = {str(obj.get("kind")) for obj in clean} & {"ConfigMap", "Secret"}
    header = [
        "# Created by jupyter-disttrain. Submit with: kubectl create -f FILE",
        "# (or kubectl apply --server-side -f FILE; client-side apply keeps a copy of each",
        "# object in an annotation limited to 256 KiB, which a large payload exceeds).",
    ]
    if kinds:
        kind = "/".join(sorted(kinds))
        header += [
            f"# The payload {kind} has no ownerReference here (that needs the job's uid, known",
            "# only once the job exists), so deleting the job leaves it: kubectl delete -f FILE",
        ]
    if not show_key:
        header.append(
            "# The job key is a placeholder: submitting creates the Secret with a fresh key."
        )
    elif kinds:
        header.append("# The payload holds the job's key: keep this file private.")
    body = yaml.safe_dump_all(clean, sort_keys=False, explicit_start=True, width=100)
    return "\n".join(header) + "\n" + body
