"""The package's one number check and its one rule for non-finite numbers (docs/protocol.md).

Standard library only, pure. A number is an ``int`` or a ``float`` and never
a ``bool`` (:func:`is_number`). A metric value may be NaN or infinite (a
diverging loss is real): in JSON this package writes it is the string
``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (:func:`json_float`, what
JavaScript's ``Number()`` reads back). Every other number (a time, a rate, a
fraction) is finite or absent (:func:`finite_or_none`). Across ranks a
metric's mean is :func:`mean` and its range :func:`extremes`; both are NaN
when a rank's value is (a NaN is not hidden by the others).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeGuard

#: A float as JSON: a finite number, or one of the three strings of a non-finite one.
JSONFloat = float | str


def is_number(value: Any) -> TypeGuard[int | float]:
    """True for an ``int`` or a ``float`` (NaN and infinities included), never a ``bool``."""
    value_type = type(value)
    if (
        value_type is float or value_type is int
    ):  # what JSON decodes: the fast path of every metric value
        return True
    return isinstance(value, int | float) and value_type is not bool


def is_finite(value: Any) -> TypeGuard[int | float]:
    """True for a :func:`is_number` that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def json_float(value: float) -> JSONFloat:
    """A metric value as JSON: itself when finite, else ``"NaN"``/``"Infinity"``/``"-Infinity"``."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def finite_or_none(value: float | None) -> float | None:
    """Any number but a metric value as JSON: itself when finite, else None."""
    return value if value is not None and math.isfinite(value) else None


def mean(values: Sequence[float]) -> float:
    """The mean of ``values`` (one per rank; not empty), exactly rounded; NaN if one is
    (or when infinities of both signs meet)."""
    try:
        return math.fsum(values) / len(values)
    except ValueError:  # inf + -inf
        return math.nan


def extremes(values: Sequence[float]) -> tuple[float, float]:
    """``(min, max)`` of ``values`` (not empty); both NaN when one of them is NaN."""
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    return min(values), max(values)
