"""Validate manifests against the real CRD schemas in ``../shared/k8s-crds`` (test helper).

A CRD's ``openAPIV3Schema`` (OpenAPI v3.0, close to JSON Schema draft 4) is
turned into a JSON Schema that ``jsonschema`` checks the way the API server
would:

* ``nullable: true`` admits null; elsewhere null is an error.
* ``x-kubernetes-int-or-string`` admits an integer or a string.
* ``format: int32``/``int64`` become range checks.
* ``x-kubernetes-preserve-unknown-fields`` admits any property below it.
* ``x-kubernetes-embedded-resource`` requires ``apiVersion`` and ``kind``.
* ``x-kubernetes-list-type: map``/``set`` reject duplicate keys/items.
* ``x-kubernetes-validations`` (CEL) and defaults are not evaluated.
* ``strict`` (the default) also rejects properties the schema does not
  list: the API server would silently drop ("prune") them, so a misspelt
  field would be lost without an error.

The object's ``metadata`` is checked as ObjectMeta (name, namespace, label
and annotation syntax) and ``apiVersion``/``kind`` against the CRD. Kubeflow
jobs also need a DNS-1035 name (the operator's admission webhook).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import ValidationError

SHARED = Path(__file__).resolve().parents[2] / "shared"
CRD_DIR = SHARED / "k8s-crds"
#: CRDs of other projects that manifests use (the Prometheus Operator's ServiceMonitor).
OTHER_CRD_DIR = Path(__file__).resolve().parent / "k8s_emulator" / "crds"

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DROPPED = frozenset(
    {
        "description",
        "default",
        "example",
        "externalDocs",
        "format",
        "nullable",
        "x-kubernetes-validations",
        "x-kubernetes-map-type",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
    }
)
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$"
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_QUALIFIED_KEY = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_LABEL_NAME}$"
MAX_ANNOTATIONS_BYTES = 256 * 1024


class ManifestError(AssertionError):
    """A manifest the API server (or the operator's webhook) would refuse."""

    def __init__(self, kind: str, errors: list[str]) -> None:
        self.errors = errors
        super().__init__(f"{kind} is invalid:\n  " + "\n  ".join(errors))


def to_json_schema(node: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """The JSON Schema (draft 4 plus ``x-kubernetes-list-type``) for an OpenAPI v3 node."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_json_schema(sub, strict=strict) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_json_schema(value, strict=strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub, strict=strict) for sub in value]
        else:
            out[key] = value
    if node.get("format") in _INT_RANGES:
        out["minimum"], out["maximum"] = _INT_RANGES[node["format"]]
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-embedded-resource"):
        out["required"] = sorted({*out.get("required", ()), "apiVersion", "kind"})
    closed = out.get("type") == "object" and "additionalProperties" not in out
    if strict and closed and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _list_type(
    validator: Any, list_type: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``x-kubernetes-list-type``: no duplicate items (set) or item keys (map)."""
    if not validator.is_type(instance, "array") or list_type not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: set[str] = set()
    for item in instance:
        if list_type == "map" and isinstance(item, Mapping):
            ident = json.dumps({key: item.get(key) for key in keys}, sort_keys=True)
        else:
            ident = json.dumps(item, sort_keys=True)
        if ident in seen:
            yield ValidationError(f"duplicate entry {ident} in a list of type {list_type}")
        seen.add(ident)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type}
)


def _object_meta(name_pattern: str) -> dict[str, Any]:
    strings = {"type": "string"}
    qualified_map = {
        "type": "object",
        "patternProperties": {_QUALIFIED_KEY: strings},
        "additionalProperties": False,
    }
    labels = json.loads(json.dumps(qualified_map))
    labels["patternProperties"][_QUALIFIED_KEY] = {
        "type": "string",
        "pattern": rf"^({_LABEL_NAME})?$",
    }
    owner = {
        "type": "object",
        "required": ["apiVersion", "kind", "name", "uid"],
        "properties": {
            **{key: strings for key in ("apiVersion", "kind", "name", "uid")},
            "controller": {"type": "boolean"},
            "blockOwnerDeletion": {"type": "boolean"},
        },
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "maxLength": 253, "pattern": name_pattern},
            "namespace": {"type": "string", "maxLength": 63, "pattern": rf"^{_DNS_LABEL}$"},
            "labels": labels,
            "annotations": qualified_map,
            "ownerReferences": {"type": "array", "items": owner},
            "finalizers": {"type": "array", "items": strings},
        },
        "additionalProperties": False,
    }


@functools.cache
def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """Every CRD in :data:`CRD_DIR` and :data:`OTHER_CRD_DIR` by (group, kind)."""
    if not CRD_DIR.is_dir():
        raise FileNotFoundError(f"CRD directory {CRD_DIR} is missing (a sibling of the repo)")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [*sorted(CRD_DIR.glob("*.yaml")), *sorted(OTHER_CRD_DIR.glob("*.yaml"))]:
        with path.open(encoding="utf-8") as fh:
            for doc in yaml.load_all(fh, Loader=loader):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    found[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = doc
    return found


@functools.cache
def _validator(api_version: str, kind: str, strict: bool) -> Any:
    group, _, version = api_version.rpartition("/")
    crd = _crds().get((group, kind))
    if crd is None:
        known = ", ".join(f"{k} ({g})" for g, k in sorted(_crds()))
        raise KeyError(f"no CRD for {kind} in group {group!r} in {CRD_DIR}; known: {known}")
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    if version not in served:
        raise KeyError(f"{kind} is not served as {api_version}; versions: {sorted(served)}")
    schema = to_json_schema(served[version]["schema"]["openAPIV3Schema"], strict=strict)
    name = rf"^{_DNS_LABEL}$" if group == "kubeflow.org" else _DNS_SUBDOMAIN
    schema.setdefault("properties", {})["metadata"] = _object_meta(name)
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
    _Validator.check_schema(schema)
    return _Validator(schema)


def manifest_errors(manifest: Mapping[str, Any], *, strict: bool = True) -> list[str]:
    """Every reason the API server would refuse ``manifest``; empty when it is valid."""
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind must be strings"]
    try:
        validator = _validator(api_version, kind, strict)
    except KeyError as exc:
        return [str(exc.args[0])]
    errors = [
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.path)))
    ]
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        errors.append(f"metadata.annotations: {size} bytes, over {MAX_ANNOTATIONS_BYTES}")
    return errors


def validate_manifest(manifest: Mapping[str, Any], *, strict: bool = True) -> None:
    """Raise :class:`ManifestError` listing every problem with ``manifest``."""
    errors = manifest_errors(manifest, strict=strict)
    if errors:
        raise ManifestError(str(manifest.get("kind")), errors)
