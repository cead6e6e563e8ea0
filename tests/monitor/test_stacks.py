"""StackBook alone: stacks by request, a hang read until output, the gathering wait."""

from __future__ import annotations

from jupyter_disttrain.events import StacksFields
from jupyter_disttrain.monitor.stacks import HANG_GATHER, MAX_STACK_REQUESTS, StackBook


def fields(request: str, quiet: float = 5.0) -> StacksFields:
    return {"request": request, "reason": "hang", "quiet": quiet, "threads": []}


def test_a_hang_is_read_once_every_rank_that_is_up_answered_until_a_rank_writes() -> None:
    book = StackBook()
    book.wrote(90.0)
    book.add("h1", 0, fields("h1"), 100.0)
    assert book.hang(101.0, lambda: [0, 1]) is None  # rank 1 has not answered yet
    assert book.hang(100.0 + HANG_GATHER, lambda: [0, 1]) == "h1"  # read with what came
    book.add("h1", 1, fields("h1"), 101.0)
    assert book.complete("h1", [0, 1]) and book.hang(101.0, lambda: [0, 1]) == "h1"
    book.wrote(99.0)  # older than the stacks: the hang goes on
    assert book.hang(102.0, lambda: [0, 1]) == "h1"
    book.wrote(100.5)  # a rank wrote after the stacks were taken
    assert book.hang(102.0, lambda: [0, 1]) is None


def test_a_relayed_copy_does_not_replace_a_ranks_own_stacks() -> None:
    book = StackBook()
    own, relayed = fields("a1", 1.0), fields("a1", 2.0)
    book.add("a1", 1, own, 10.0)
    book.add("a1", 1, relayed, 11.0)
    assert book.of("a1") == {1: own}
    assert book.hang(1e9, lambda: [1]) is None  # asked, not a hang
    assert book.newest() == "a1" and book.of("a2") is None
    assert not book.complete("a2", [])  # no stacks: never complete


def test_only_the_newest_requests_are_kept() -> None:
    book = StackBook()
    for i in range(MAX_STACK_REQUESTS + 2):
        book.add(f"a{i}", 0, fields(f"a{i}"), float(i))
    assert book.of("a0") is None and book.of("a1") is None
    assert book.of("a2") is not None
    assert book.newest() == f"a{MAX_STACK_REQUESTS + 1}"
