"""The pause request's control value, and the frame a pause stops in."""

from __future__ import annotations

import sys

import pytest

from jupyter_disttrain.runtime import pausing

KEY = b"k" * 32


@pytest.mark.parametrize(
    ("ranks", "body"),
    [(None, "3:all"), ([5, 1, 5], "3:1,5"), ([0], "3:0")],
)
def test_a_request_reads_back_as_written(ranks: list[int] | None, body: str) -> None:
    text = pausing.render_request(3, ranks, KEY)
    assert text.startswith(body + ":") and len(text) == len(body) + 65
    assert pausing.parse_request(text, KEY) == (3, None if ranks is None else frozenset(ranks))


def test_a_request_not_signed_with_the_job_key_is_none() -> None:
    text = pausing.render_request(3, [1], KEY)
    assert pausing.parse_request(text, b"o" * 32) is None
    assert pausing.parse_request(text.replace("3:1:", "3:2:"), KEY) is None  # another body
    assert pausing.parse_request("3:1", KEY) is None  # no tag


@pytest.mark.parametrize(
    "body",
    ["", "3", "all", "0:all", "-1:all", "x:all", "3:", "3:1,,2", "3:one", "3:1;rm", " :all"],
)
def test_a_signed_body_that_is_no_request_is_none(body: str) -> None:
    tag = pausing.signature(KEY, body).decode()
    assert pausing.parse_request(f"{body}:{tag}", KEY) is None


def test_the_pause_stops_in_the_innermost_frame_of_the_users_code() -> None:
    def library() -> object:
        return sys._getframe()

    def user() -> tuple[object, object]:
        return sys._getframe(), library()

    outer, inner = user()
    assert pausing.user_frame(inner, __file__) is inner  # type: ignore[arg-type]
    assert pausing.user_frame(inner, "<distrain-cell>") is None  # type: ignore[arg-type]
    assert outer is not inner


def test_a_request_without_the_handler_is_refused() -> None:
    # this process never installed the handler (only workers do, from their main thread)
    assert pausing.request() is False
