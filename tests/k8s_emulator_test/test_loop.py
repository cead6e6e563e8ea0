"""The emulator's controller work queue: a key delayed many times waits once."""

from __future__ import annotations

import threading
import time

from tests.k8s_emulator.apiserver import ApiServer
from tests.k8s_emulator.loop import ControlLoop, Key
from tests.k8s_emulator.resources import Registry
from tests.k8s_emulator.store import Store


class Recorder(ControlLoop):
    """Records each reconcile's key and time; asks for nothing more."""

    name = "recorder"

    def __init__(self, api: ApiServer) -> None:
        self.calls: list[tuple[Key, float]] = []
        self.called = threading.Event()
        super().__init__(api, resync=60.0)

    def reconcile(self, key: Key) -> float | None:
        self.calls.append((key, time.monotonic()))
        self.called.set()
        return None


def test_a_key_requeued_after_delays_waits_once_for_the_earliest() -> None:
    """A reconcile that asks for a deadline each time must not pile copies up (a TrainJob's
    activeDeadlineSeconds): one entry per key, due at the earliest time asked for."""
    loop = Recorder(ApiServer(Store(), Registry()))
    try:
        key = ("default", "job")
        began = time.monotonic()
        for _ in range(250):
            loop.enqueue(key, after=60.0)
        loop.enqueue(key, after=0.3)  # earlier: it replaces the wait
        loop.enqueue(key, after=30.0)  # later than the one that waits: nothing changes
        assert loop._due == {key: loop._due[key]}
        assert 0.2 < loop._due[key] - began < 0.5
        assert loop.called.wait(10), "the key never came due"
        time.sleep(0.5)  # the stale entries are no calls
        assert [k for k, _ in loop.calls] == [key]
        assert loop.calls[0][1] - began >= 0.3
        assert loop._due == {}
    finally:
        loop.close()
