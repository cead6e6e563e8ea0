"""The frames a pause or new breakpoints act on, and the handler's absence outside workers."""

from __future__ import annotations

import sys
from types import FrameType

from jupyter_disttrain.runtime import pausing


def _stack() -> tuple[FrameType, FrameType, FrameType]:
    def library() -> FrameType:
        return sys._getframe()

    def user() -> tuple[FrameType, FrameType]:
        return sys._getframe(), library()

    middle, inner = user()
    return sys._getframe(), middle, inner


def test_the_innermost_and_outermost_frames_of_a_file() -> None:
    outer, middle, inner = _stack()
    assert pausing.user_frame(inner, __file__) is inner
    assert pausing.user_frame(inner, "<distrain-cell>") is None
    assert pausing.outermost_frame(inner, __file__).f_code.co_filename == __file__
    assert pausing.outermost_frame(inner, __file__) is not inner
    assert middle.f_code.co_name == "user" and outer.f_code.co_name == "_stack"


def test_requests_without_the_handler_are_refused() -> None:
    # this process never installed the handler (only workers do, from their main thread)
    assert pausing.request_pause() is False
    assert pausing.request_breaks([{"line": 1, "condition": None}]) is False
