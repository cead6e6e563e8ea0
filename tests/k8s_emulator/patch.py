"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) on plain JSON values."""

from __future__ import annotations

from typing import Any

from .meta import bad_request, deep


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the merge patch ``patch`` applied (``target`` is not changed)."""
    if not isinstance(patch, dict):
        return deep(patch)
    out = deep(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def json_patch(target: Any, operations: Any) -> Any:
    """``target`` with the RFC 6902 ``operations`` applied (``target`` is not changed)."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = deep(target)
    for op in operations:
        try:
            doc = _apply(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise bad_request(f"the JSON patch operation {op} cannot be applied: {exc}") from None
    return doc


def _get(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _apply(doc: Any, op: dict[str, Any]) -> Any:
    kind, parts = op["op"], _pointer(op["path"])
    if kind == "test":
        if _get(doc, parts) != op["value"]:
            raise ValueError("test failed")
        return doc
    if kind in ("move", "copy"):
        value = deep(_get(doc, _pointer(op["from"])))
        if kind == "move":
            doc = _apply(doc, {"op": "remove", "path": op["from"]})
        return _apply(doc, {"op": "add", "path": op["path"], "value": value})
    if not parts:
        if kind == "remove":
            return None
        return deep(op["value"])
    parent, last = _parent(doc, parts), parts[-1]
    if kind == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    elif kind in ("add", "replace"):
        value = deep(op["value"])
        if isinstance(parent, list):
            if kind == "add":
                parent.insert(len(parent) if last == "-" else int(last), value)
            else:
                parent[int(last)] = value
        else:
            if kind == "replace" and last not in parent:
                raise KeyError(last)
            parent[last] = value
    else:
        raise ValueError(f"unknown operation {kind!r}")
    return doc
