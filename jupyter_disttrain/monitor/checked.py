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
from collections.abc import Callable, Iterable
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
    wrong = _checker(hint)(value)
    if wrong is not None:
        raise ShapeError(where + wrong)


#: Checks a value: None when it fits, else where in it (``.key``, ``[i]``) and what is wrong.
Checker = Callable[[object], "str | None"]


@cache
def _checker(hint: Any) -> Checker:
    """The check of ``hint``, made once per type (a record of 8,192 ranks is read fast)."""
    origin = get_origin(hint)
    if hint is Any:
        return lambda value: None
    if origin in (Union, types.UnionType):
        return _union(hint, [_checker(option) for option in get_args(hint)])
    if origin is Literal:
        allowed = get_args(hint)
        return lambda value: (
            None if value in allowed else f": {_shown(value)} is not one of {allowed}"
        )
    if origin is list:
        return _list(_checker(get_args(hint)[0]))
    if origin is dict:
        return _dict(_checker(get_args(hint)[1]))
    if typing.is_typeddict(hint):
        return _fields(hint)
    return _scalar(hint)


def _union(hint: Any, options: list[Checker]) -> Checker:
    exact = frozenset(t for option in get_args(hint) for t in _EXACT.get(option, ()))

    def check_union(value: object) -> str | None:
        if type(value) in exact or any(option(value) is None for option in options):
            return None
        return f": {_shown(value)} is none of {hint}"

    return check_union


def _list(item: Checker) -> Checker:
    def check_list(value: object) -> str | None:
        if not isinstance(value, list):
            return f": {_shown(value)} is not a list"
        return _first_wrong(enumerate(value), item, lambda i: f"[{i}]")

    return check_list


def _dict(item: Checker) -> Checker:
    def check_dict(value: object) -> str | None:
        if not isinstance(value, dict):
            return f": {_shown(value)} is not an object"
        for key in value:
            if not isinstance(key, str):
                return f": key {key!r} is not a string"
        return _first_wrong(value.items(), item, lambda key: f".{key}")

    return check_dict


def _first_wrong(
    elements: Iterable[tuple[Any, object]], item: Checker, where: Callable[[Any], str]
) -> str | None:
    """Where the first of ``elements`` (position, value) that ``item`` finds wrong is, and
    what is wrong with it; None when all fit (the place is spelled only then)."""
    for at, element in elements:
        wrong = item(element)
        if wrong is not None:
            return where(at) + wrong
    return None


def _fields(shape: Any) -> Checker:
    required: frozenset[str] = shape.__required_keys__
    checks: dict[str, Checker] = {}  # made at the first use (a shape may name itself)

    def check_fields(value: object) -> str | None:
        if not isinstance(value, dict):
            return f": {_shown(value)} is not an object"
        if not checks:
            checks.update({key: _checker(h) for key, h in typing.get_type_hints(shape).items()})
        missing = required - value.keys()
        if missing:
            return f": missing {', '.join(sorted(missing))}"
        unknown = value.keys() - checks.keys()
        if unknown:
            return f": unknown {', '.join(sorted(map(str, unknown)))}"
        for key, element in value.items():
            wrong = checks[key](element)
            if wrong is not None:
                return f".{key}{wrong}"
        return None

    return check_fields


_SCALARS: dict[Any, Callable[[object], bool]] = {
    type(None): lambda value: value is None,
    bool: lambda value: isinstance(value, bool),
    int: lambda value: isinstance(value, int) and not isinstance(value, bool),
    float: lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    str: lambda value: isinstance(value, str),
}


#: The types JSON decodes to that each scalar type takes as they are (checked first: fast).
_EXACT: dict[Any, tuple[type, ...]] = {
    type(None): (type(None),),
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
}


def _scalar(hint: Any) -> Checker:
    fits = _SCALARS.get(hint)
    if fits is None:
        raise TypeError(f"cannot check values of type {hint!r}")
    name = hint.__name__
    exact = frozenset(_EXACT[hint])

    def check_scalar(value: object) -> str | None:
        if type(value) in exact or fits(value):
            return None
        return f": {_shown(value)} is not of type {name}"

    return check_scalar


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
