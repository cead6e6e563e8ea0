"""Strategic merge patch for the pod, job and JobSet specs Kubeflow Trainer patches.

Objects merge key by key (``null`` deletes a key); a list merges element by
element when the Kubernetes type marks it ``patchStrategy: merge`` (the
element's merge key is below, by field name), and is replaced otherwise
(``command``, ``args``, ``tolerations``, ``envFrom``...). Lists of scalars
marked ``merge`` (``finalizers``) become the union. The directives
``$patch: replace`` and ``$patch: delete`` (in a map, or in a list element) are
honoured; ``$retainKeys`` and ``$setElementOrder`` are not.
"""

from __future__ import annotations

from typing import Any

from .meta import deep

#: Field name -> merge key of the Kubernetes lists with ``patchStrategy: merge``.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "claims": "name",
    "replicatedJobs": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "hostAliases": "ip",
    "conditions": "type",
}
#: Lists of scalars merged as a union.
UNION_LISTS = frozenset({"finalizers"})


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """``original`` with ``patch`` applied (neither is changed)."""
    if isinstance(patch, dict) and isinstance(original, dict):
        directive = patch.get("$patch")
        if directive == "replace":
            return {k: deep(v) for k, v in patch.items() if k != "$patch"}
        if directive == "delete":
            return None
        out = deep(original)
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            if value is None:
                out.pop(key, None)
            elif key in out:
                merged = strategic_merge(out[key], value, key)
                if merged is None:
                    out.pop(key)
                else:
                    out[key] = merged
            else:
                out[key] = _clean(value)
        return out
    if isinstance(patch, list) and isinstance(original, list):
        if field in MERGE_KEYS:
            return _merge_list(original, patch, MERGE_KEYS[field])
        if field in UNION_LISTS:
            return [*original, *(v for v in patch if v not in original)]
        return _clean(patch)
    return _clean(patch)


def _merge_list(original: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = [deep(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            continue
        index = next(
            (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(_clean(item))
        else:
            out[index] = strategic_merge(out[index], item)
    return out


def _clean(value: Any) -> Any:
    """A copy of a patch value without directives and ``null`` members."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value
