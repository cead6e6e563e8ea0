"""Object metadata helpers: timestamps, names, label and field selectors, API errors."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

Obj = dict[str, Any]

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = re.compile(rf"^{DNS_LABEL}(\.{DNS_LABEL})*$")
_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def now() -> str:
    """The current time as the API server writes it (RFC 3339, seconds, UTC)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> float:
    """Seconds since the epoch of an RFC 3339 timestamp."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def new_uid() -> str:
    return str(uuid.uuid4())


T = TypeVar("T")


def deep(obj: T) -> T:
    """A deep copy of JSON data (objects in the store are never shared with callers)."""
    if isinstance(obj, dict):
        return cast(T, {key: deep(value) for key, value in obj.items()})
    if isinstance(obj, list):
        return cast(T, [deep(value) for value in obj])
    return obj


def name_error(name: str) -> str | None:
    """Why ``name`` is not a valid object name (RFC 1123 subdomain), or None."""
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not DNS_SUBDOMAIN.match(name):
        return _DNS_SUBDOMAIN_MSG
    return None


# --- Errors ----------------------------------------------------------------------------------


class ApiError(Exception):
    """An error response: a ``Status`` object with code, reason, message and details."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = dict(details) if details else None

    def status(self) -> Obj:
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            out["details"] = self.details
        out["code"] = self.code
        return out


def not_found(qualified: str, name: str, group: str, plural: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified} "{name}" not found',
        {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": plural},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, group: str, name: str, causes: list[Obj]) -> ApiError:
    """422 Invalid with one cause per field error, worded like the API server."""
    qualified = f"{kind}.{group}" if group else kind
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: Obj = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


# --- Selectors -------------------------------------------------------------------------------

_REQ = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<value>\([^)]*\)|[A-Za-z0-9_.-]*))?\s*$"
)


def _split_requirements(text: str) -> list[str]:
    """Split a selector on commas that are not inside ``(...)``."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


LabelTest = Callable[[Mapping[str, str]], bool]


def label_selector(text: str | None) -> LabelTest:
    """A predicate for a ``labelSelector`` (=, ==, !=, in, notin, exists, !exists)."""
    if not text:
        return lambda labels: True
    requirements: list[tuple[str, str, frozenset[str]]] = []
    for part in _split_requirements(text):
        match = _REQ.match(part)
        if not match:
            raise bad_request(f"unable to parse requirement: {part!r}")
        key, op, value = match["key"], (match["op"] or "").strip(), match["value"] or ""
        values = frozenset(v.strip() for v in value.strip("()").split(",") if v.strip())
        if not op:
            op = "!exists" if match["neg"] else "exists"
        elif op in ("=", "=="):
            op, values = "in", frozenset({value})
        elif op == "!=":
            op, values = "notin", frozenset({value})
        requirements.append((key, op, values))

    def test(labels: Mapping[str, str]) -> bool:
        for key, op, values in requirements:
            if op == "exists":
                ok = key in labels
            elif op == "!exists":
                ok = key not in labels
            elif op == "in":
                ok = labels.get(key) in values
            else:  # notin: an absent key matches too
                ok = labels.get(key) not in values
            if not ok:
                return False
        return True

    return test


FieldTest = Callable[[Obj], bool]


def lookup(obj: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` in ``obj`` (None when missing)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def field_selector(text: str | None, supported: frozenset[str]) -> FieldTest:
    """A predicate for a ``fieldSelector`` over the fields a resource supports (=, ==, !=)."""
    if not text:
        return lambda obj: True
    tests: list[FieldTest] = []
    for part in _split_requirements(text):
        match = re.match(r"^\s*([A-Za-z0-9_.\[\]/-]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = match.groups()
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")

        def test(obj: Obj, f: str = field, o: str = op, v: str = value) -> bool:
            actual = lookup(obj, f)
            text = "" if actual is None else str(actual)
            return (text == v) if o in ("=", "==") else (text != v)

        tests.append(test)
    return lambda obj: all(test(obj) for test in tests)
