"""The tests' one polling wait: a condition read until it holds, the evidence in the failure.

A wait that times out is a failing test, and its message must say what was awaited and
what the job or cluster looked like then (its logs, its last value): ``what`` is that
text, or a callable that gives it, called only on a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds between two reads of a condition, unless a wait says otherwise.
POLL_SECONDS = 0.1

#: What a timed-out wait reports: a text, or a callable giving it (a job's logs, read late).
Detail = str | Callable[[], object] | None


def describe(what: Detail) -> str:
    """``what`` as text; a callable's failure is reported, not raised (the timeout is the
    failure, the detail a courtesy)."""
    if what is None:
        return ""
    if isinstance(what, str):
        return what
    try:
        return str(what())
    except Exception as exc:
        return f"(no detail: {exc!r})"


def wait_for(
    check: Callable[[], T],
    timeout: float = 30.0,
    what: Detail = "",
    *,
    interval: float = POLL_SECONDS,
) -> T:
    """``check()``'s first truthy value, read every ``interval`` seconds; AssertionError
    with :func:`describe` of ``what`` once ``timeout`` seconds passed without one."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {describe(what)}")
        time.sleep(interval)
    return value


def wait_for_value(
    read: Callable[[], T],
    ok: Callable[[T], bool],
    timeout: float = 30.0,
    *,
    interval: float = POLL_SECONDS,
) -> T:
    """The first value of ``read()`` that ``ok`` accepts; AssertionError with the last
    value read once ``timeout`` seconds passed without one."""
    deadline = time.monotonic() + timeout
    while not ok(value := read()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s; the last value read: {value!r}")
        time.sleep(interval)
    return value
