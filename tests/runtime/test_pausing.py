"""The pause request's control value, and the frame a pause stops in."""

from __future__ import annotations

import sys

import pytest

from jupyter_disttrain.runtime import pausing


@pytest.mark.parametrize(
    ("ranks", "text"),
    [(None, "3:all"), ([5, 1, 5], "3:1,5"), ([0], "3:0")],
)
def test_a_request_reads_back_as_written(ranks: list[int] | None, text: str) -> None:
    assert pausing.render_request(3, ranks) == text
    assert pausing.parse_request(text) == (3, None if ranks is None else frozenset(ranks))


@pytest.mark.parametrize(
    "text",
    ["", "3", "all", "0:all", "-1:all", "x:all", "3:", "3:1,,2", "3:one", "3:1;rm", " :all"],
)
def test_anything_else_is_no_request(text: str) -> None:
    assert pausing.parse_request(text) is None


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
