"""Signed control requests: what the notebook writes is what a rank reads, and nothing else is."""

from __future__ import annotations

import json

import pytest

from jupyter_disttrain.runtime import control

KEY = b"k" * 32


def test_a_request_reads_back_with_the_job_key_only() -> None:
    text = control.render(7, "1,5", KEY)
    assert text.startswith("7:1,5:") and len(text) == len("7:1,5:") + 64
    assert control.parse(text, KEY) == (7, "1,5")
    assert control.parse(text, b"o" * 32) is None
    assert control.parse(text.replace("7:1,5:", "7:1,6:"), KEY) is None  # another body
    assert control.parse(text.replace("7:", "8:", 1), KEY) is None  # another number
    assert control.parse("7:1,5", KEY) is None  # no tag
    assert control.number_of(text) == 7 and control.number_of("junk") == 0


def test_a_breaks_body_survives_colons_in_its_conditions() -> None:
    spots = [{"line": 4, "condition": "d['a:b'] == 1"}, {"line": 9}]
    text = control.render(1, control.breaks_body(spots), KEY)
    number, body = control.parse(text, KEY) or (0, "")
    assert number == 1
    assert control.parse_breaks(body) == [
        {"line": 4, "condition": "d['a:b'] == 1"},
        {"line": 9, "condition": None},
    ]


@pytest.mark.parametrize(
    ("signed_part", "why"),
    [
        ("0:all", "number 0"),
        ("-1:all", "negative"),
        ("x:all", "not a number"),
        ("all", "no number"),
    ],
)
def test_a_signed_value_without_a_request_number_is_none(signed_part: str, why: str) -> None:
    text = f"{signed_part}:{control.signature(KEY, signed_part).decode()}"
    assert control.parse(text, KEY) is None, why


def test_an_oversized_value_is_not_read() -> None:
    body = "1," * control.MAX_BODY
    assert control.parse(control.render(1, body, KEY), KEY) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("all", (True, None)),
        ("1,5", (True, frozenset({1, 5}))),
        ("0", (True, frozenset({0}))),
        ("", (False, None)),
        ("1,,2", (False, None)),
        ("one", (False, None)),
        ("1;rm", (False, None)),
    ],
)
def test_pause_bodies(body: str, expected: tuple[bool, frozenset[int] | None]) -> None:
    assert control.parse_ranks(body) == expected
    if expected[0]:
        assert control.parse_ranks(control.ranks_body(expected[1])) == expected


@pytest.mark.parametrize(
    "body",
    [
        "{}",
        "[1]",
        '[{"line": "4"}]',
        '[{"line": 4.0}]',
        '[{"line": true}]',
        '[{"line": 4, "condition": 5}]',
        "[" * 5000,
        "not json",
        json.dumps([{"line": 1}] * (control.MAX_BREAKS + 1)),
    ],
)
def test_what_is_not_a_list_of_breakpoints_is_none(body: str) -> None:
    assert control.parse_breaks(body) is None
