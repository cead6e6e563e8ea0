"""Custom resource validation the way the API server does it: schema check, then pruning.

Validation uses the CRD's ``openAPIV3Schema`` (converted by ``tests/crd_schema.py``
without its strict mode) and reports each problem as a 422 cause with a
``field`` path and a ``reason`` (``FieldValueRequired``, ``FieldValueTypeInvalid``,
``FieldValueNotSupported``, ``FieldValueInvalid``). Fields the schema does not
know are pruned, as the API server does for structural schemas; each one is
reported so the handler can answer with a ``Warning`` header (the default
``fieldValidation=Warn``) or a 400 (``fieldValidation=Strict``). Schema
defaults are applied (after pruning) to the resources that ask for it
(:attr:`Resource.defaulted`: Trainer v2's kinds); CEL rules
(``x-kubernetes-validations``) are not evaluated here (the few a controller
depends on are checked by hand, see :mod:`trainer_webhooks`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from .meta import Obj
from .resources import Resource

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


@functools.cache
def _validator(resource: Resource) -> Any:
    import jsonschema  # (seconds to import: only when a custom resource is checked)

    from ..crd_schema import to_json_schema

    assert resource.schema is not None
    schema = to_json_schema(resource.schema, strict=False)
    # metadata is the API server's business (ObjectMeta), not the CRD's.
    schema.get("properties", {}).pop("metadata", None)
    return jsonschema.Draft4Validator(schema)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _cause(error: Any) -> Obj:
    """A 422 cause for a ``jsonschema.ValidationError``."""
    field = _path(error.absolute_path)
    value = error.instance
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        field = f"{field}.{missing}" if field else missing
        return {"reason": "FieldValueRequired", "message": "Required value", "field": field}
    if error.validator == "type":
        expected = error.validator_value
        expected = expected if isinstance(expected, str) else " or ".join(expected)
        message = (
            f'Invalid value: "{_type_name(value)}": {field} in body must be of type '
            f'{expected}: "{_type_name(value)}"'
        )
        return {"reason": "FieldValueTypeInvalid", "message": message, "field": field}
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        message = f"Unsupported value: {json.dumps(value)}: supported values: {allowed}"
        return {"reason": "FieldValueNotSupported", "message": message, "field": field}
    message = f"Invalid value: {json.dumps(value)}: {field} in body {error.message}"
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


def validate(resource: Resource, obj: Obj) -> list[Obj]:
    """Every schema violation of ``obj`` as a 422 cause (empty when valid)."""
    errors = sorted(_validator(resource).iter_errors(obj), key=lambda e: _path(e.absolute_path))
    return [_cause(error) for error in errors]


def prune(resource: Resource, obj: Obj) -> list[str]:
    """Remove the fields the schema does not know from ``obj``; return their paths."""
    assert resource.schema is not None
    unknown: list[str] = []
    if resource.schema.get("x-kubernetes-preserve-unknown-fields"):
        return unknown
    for key in list(obj):
        if key == "metadata":
            continue
        sub = resource.schema.get("properties", {}).get(key)
        if sub is None:
            unknown.append(key)
            del obj[key]
        else:
            _prune(obj[key], sub, key, unknown)
    return unknown


def _prune(value: Any, schema: dict[str, Any], path: str, unknown: list[str]) -> None:
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _prune(item, schema["items"], f"{path}[{index}]", unknown)
        return
    if not isinstance(value, dict):
        return
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_all = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
    for key in list(value):
        child = f"{path}.{key}"
        if key in props:
            _prune(value[key], props[key], child, unknown)
        elif isinstance(extra, dict):
            _prune(value[key], extra, child, unknown)
        elif not keep_all:
            unknown.append(child)
            del value[key]


def apply_defaults(resource: Resource, obj: Obj) -> None:
    """Fill in the schema's ``default`` values, as the API server does for structural schemas.

    A default is set where its field is absent from an object that is present
    (defaults never create a missing parent object).
    """
    assert resource.schema is not None
    for key, sub in (resource.schema.get("properties") or {}).items():
        if key != "metadata" and key in obj:
            _default(obj[key], sub)


def _default(value: Any, schema: dict[str, Any]) -> None:
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])
        return
    if not isinstance(value, dict):
        return
    props = schema.get("properties") or {}
    for key, sub in props.items():
        if key not in value and "default" in sub:
            value[key] = json.loads(json.dumps(sub["default"]))
        if key in value:
            _default(value[key], sub)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key in value:
            if key not in props:
                _default(value[key], extra)
