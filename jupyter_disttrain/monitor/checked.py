"""JSON read back as one of the monitor's shapes, every field checked against its type hint.

:func:`checked_snapshot` is how a :class:`~.records.Snapshot` written by
another process (the job's follower, see :mod:`jupyter_disttrain.service.recorded`)
is read: each key a shape requires must be there with a value of its declared
type, recursively (lists, string-keyed dicts, unions with None, literals and
nested TypedDicts); unknown keys are errors. A JSON integer is a float; a
bool is never a number.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Any, Literal, Union, cast, get_args, get_origin

from .records import Snapshot


class ShapeError(ValueError):
    """A value that does not have the shape it is read as; the message names where."""


def checked_snapshot(value: object) -> Snapshot:
    """``value`` as a :class:`Snapshot`; raises :class:`ShapeError` naming the first bad field.

    A cause recorded before its class was named ``category`` (``kind``) is read as one."""
    cause = value.get("cause") if isinstance(value, dict) else None
    if isinstance(cause, dict) and "kind" in cause and "category" not in cause:
        cause["category"] = cause.pop("kind")
    check(value, Snapshot, "snapshot")
    return cast(Snapshot, value)


def check(value: object, hint: Any, where: str) -> None:
    """Raise :class:`ShapeError` unless ``value`` (from JSON) is of type ``hint``."""
    origin = get_origin(hint)
    if hint is Any:
        return
    if origin in (Union, types.UnionType):
        for option in get_args(hint):
            try:
                check(value, option, where)
                return
            except ShapeError:
                continue
        raise ShapeError(f"{where}: {_shown(value)} is none of {hint}")
    if origin is Literal:
        if value not in get_args(hint):
            raise ShapeError(f"{where}: {_shown(value)} is not one of {get_args(hint)}")
        return
    if origin is list:
        if not isinstance(value, list):
            raise ShapeError(f"{where}: {_shown(value)} is not a list")
        (item,) = get_args(hint)
        for i, element in enumerate(value):
            check(element, item, f"{where}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise ShapeError(f"{where}: {_shown(value)} is not an object")
        _, item = get_args(hint)
        for key, element in value.items():
            if not isinstance(key, str):
                raise ShapeError(f"{where}: key {key!r} is not a string")
            check(element, item, f"{where}.{key}")
        return
    if typing.is_typeddict(hint):
        _check_fields(value, hint, where)
        return
    _check_scalar(value, hint, where)


def _check_scalar(value: object, hint: Any, where: str) -> None:
    if hint is type(None):
        ok = value is None
    elif hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"{where}: cannot check values of type {hint!r}")
    if not ok:
        raise ShapeError(f"{where}: {_shown(value)} is not of type {hint.__name__}")


def _check_fields(value: object, shape: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ShapeError(f"{where}: {_shown(value)} is not an object")
    hints = _hints(shape)
    missing = shape.__required_keys__ - value.keys()
    if missing:
        raise ShapeError(f"{where}: missing {', '.join(sorted(missing))}")
    unknown = value.keys() - hints.keys()
    if unknown:
        raise ShapeError(f"{where}: unknown {', '.join(sorted(map(str, unknown)))}")
    for key, element in value.items():
        check(element, hints[key], f"{where}.{key}")


@cache
def _hints(shape: Any) -> dict[str, Any]:
    return typing.get_type_hints(shape)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
