"""A job's own labels (``JobSpec.labels``) on its Kubeflow object, and back (pure).

Each ``(key, value)`` becomes the label ``label.disttrain.jupyter.org/KEY``
(so ``kubectl get pytorchjobs -l label.disttrain.jupyter.org/source=session``
finds sessions); a value a label cannot hold goes to an annotation of the
same key instead. Listings and attach read both back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .syntax import is_label_key, is_label_value

PREFIX: Final = "label.disttrain.jupyter.org/"


def job_labels(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) carrying ``pairs``; ValueError for a key no label can have."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for key, value in pairs:
        name = PREFIX + key
        if not is_label_key(name):
            raise ValueError(f"job label {key!r} is not a label name (letters, digits, -_.)")
        (labels if is_label_value(value) else annotations)[name] = value
    return labels, annotations


def read_labels(meta: Mapping[str, Any]) -> dict[str, str]:
    """The job labels recorded in an object's ``metadata`` (annotations, then labels)."""
    found: dict[str, str] = {}
    for part in ("annotations", "labels"):
        for key, value in (meta.get(part) or {}).items():
            if str(key).startswith(PREFIX):
                found[str(key)[len(PREFIX) :]] = str(value)
    return found
