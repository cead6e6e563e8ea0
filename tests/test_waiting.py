"""The tests' one polling wait: its value, its timeout and what its failure says."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.waiting import describe, wait_for, wait_for_value


def test_the_wait_returns_the_first_truthy_value_read() -> None:
    reads = iter([None, 0, [], "", [3]])
    assert wait_for(lambda: next(reads), 5, interval=0.001) == [3]


def test_a_wait_that_times_out_names_what_it_awaited_and_reads_the_detail_only_then() -> None:
    asked: list[int] = []

    def logs() -> str:
        asked.append(1)
        return "rank 0: still loading"

    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        wait_for(lambda: False, 0.2, logs, interval=0.01)
    assert time.monotonic() - started >= 0.2
    assert str(failed.value) == "not within 0.2 s: rank 0: still loading"
    assert asked == [1]


def test_a_detail_that_fails_is_reported_and_the_timeout_stays_the_failure() -> None:
    def broken() -> str:
        raise ConnectionError("the API is gone")

    assert describe(broken) == "(no detail: ConnectionError('the API is gone'))"
    assert describe("text") == "text" and describe(None) == ""
    with pytest.raises(AssertionError, match="no detail: ConnectionError"):
        wait_for(lambda: None, 0.0, broken)


def test_a_value_wait_returns_the_accepted_value_and_shows_the_last_one_on_a_timeout() -> None:
    counter = itertools.count()
    assert wait_for_value(lambda: next(counter), lambda n: n >= 3, 5, interval=0.001) == 3
    with pytest.raises(
        AssertionError, match=r"not within 0 s; the last value read: \{'state': 'Pending'\}"
    ):
        wait_for_value(lambda: {"state": "Pending"}, lambda j: j["state"] == "Running", 0)
