"""The one number check and non-finite rule: numbers, metric values as JSON, mean, extremes."""

from __future__ import annotations

import json
import math

import pytest

from jupyter_disttrain.runtime.numbers import (
    extremes,
    finite_or_none,
    is_finite,
    is_number,
    json_float,
    mean,
)

INF, NAN = math.inf, math.nan


def test_a_number_is_an_int_or_a_float_never_a_bool() -> None:
    assert [is_number(v) for v in (1, 1.5, NAN, INF, True, "1", None)] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert [is_finite(v) for v in (1, 1.5, NAN, -INF, False)] == [True, True, False, False, False]


def test_a_metric_value_as_json_is_a_number_or_one_of_three_strings() -> None:
    shown = [json_float(v) for v in (0.5, NAN, INF, -INF)]
    assert shown == [0.5, "NaN", "Infinity", "-Infinity"]
    assert json.dumps(shown, allow_nan=False)  # every one is valid JSON
    assert [float(v) for v in shown[1:]] == pytest.approx([NAN, INF, -INF], nan_ok=True)
    assert (finite_or_none(2.0), finite_or_none(NAN), finite_or_none(None)) == (2.0, None, None)


def test_a_ranks_nan_is_not_hidden_by_the_others() -> None:
    assert mean([0.1] * 10) == 0.1  # exactly rounded
    assert math.isnan(mean([1.0, NAN])) and math.isnan(mean([INF, -INF]))
    assert mean([1.0, INF]) == INF
    assert extremes([3.0, -1.0, 2.0]) == (-1.0, 3.0)
    low, high = extremes([3.0, NAN])
    assert math.isnan(low) and math.isnan(high)
