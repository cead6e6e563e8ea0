"""Listing under a policy: a kernel waits for every backend, a polled server limits and caches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.base import JobRecord
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.service import JobService, ListPolicy
from jupyter_disttrain.service.listing import ONE_SHOT, POLLED, Lister
from tests.server.jobdirs import write_job


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A job home of this test's own: only the jobs it writes are listed."""
    monkeypatch.setenv("DISTRAIN_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


class Counted(LocalBackend):
    """The local backend, counting its listings and taking ``delay`` seconds for each."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.calls = 0

    def list_jobs(self) -> list[JobRecord]:
        self.calls += 1
        time.sleep(self.delay)
        return super().list_jobs()


def test_a_kernel_waits_for_a_slow_backend_and_reuses_nothing(home: Path) -> None:
    write_job("slow-one")
    backend = Counted(delay=0.5)
    service = JobService(listing=ONE_SHOT)
    for _ in range(2):
        listing = service.list_jobs([backend])
        assert [r.name for r in listing.records] == ["slow-one"] and not listing.errors
    assert backend.calls == 2


def test_a_polled_listing_is_limited_cached_and_dropped_after_a_stop(home: Path) -> None:
    write_job("polled")
    slow = Counted(delay=1.0)
    service = JobService(listing=ListPolicy(timeout=0.1, cache_seconds={}))
    try:
        listing = service.list_jobs([slow])
        assert listing.records == [] and listing.errors == {"local": "no answer within 0.1 s"}
    finally:
        service.close()

    backend = Counted()
    cached = JobService(listing=ListPolicy(timeout=5.0, cache_seconds={"local": 60.0}))
    try:
        assert [r.name for r in cached.list_jobs([backend]).records] == ["polled"]
        cached.list_jobs([backend])
        assert backend.calls == 1  # the answer was reused
        assert not cached.stop_listed(backend, "polled")  # finished: nothing to stop
        cached.list_jobs([backend])
        assert backend.calls == 2  # the stop dropped the cached answer
    finally:
        cached.close()


def test_a_polled_server_keeps_one_instance_per_backend() -> None:
    lister = Lister(POLLED)
    first, second = LocalBackend(), LocalBackend()
    assert lister.keep([first]) == [first]
    assert lister.keep([second])[0] is first
    assert Lister(ONE_SHOT).keep([second])[0] is second
