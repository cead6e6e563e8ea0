"""The stand-in's counted store requests (runtime/standin_store.py), on a real c10d store."""

from __future__ import annotations

import json
import threading

import torch.distributed as dist

from jupyter_disttrain.runtime.jobstore import SignedStore
from jupyter_disttrain.runtime.standin_store import MARK, StoreTally

HashStore = getattr(dist, "HashStore")  # noqa: B009 (not in torch's stubs' exports)


def test_each_call_on_the_wire_is_one_request_by_side_and_operation() -> None:
    tally = StoreTally()
    store = HashStore()
    rank0 = SignedStore(tally.rank0_store(store), b"k" * 32)
    sender = SignedStore(tally.sender_store(store), b"k" * 32)
    assert tally.line(now=100.0) is None  # the first call starts the count
    for n in range(4):
        sender.set_sealed(f"m{n}", b"lines")
        sender.add("seq", 1)
    assert rank0.check([f"m{n}" for n in range(4)])
    assert [bytes(b or b"") for b in rank0.get_many(["m0", "m1"], sealed=True)] == [b"lines"] * 2
    assert rank0.delete_key("m0")
    line = tally.line(now=102.0)
    assert line is not None and line.startswith(MARK)
    fields = json.loads(line[len(MARK) :])
    assert fields["senders_by_op"] == {"add": 2.0, "set": 2.0}  # 8 requests in 2 s
    assert fields["rank0_by_op"] == {"check": 0.5, "delete_key": 0.5, "multi_get": 0.5}
    assert (fields["rank0_per_s"], fields["senders_per_s"], fields["seconds"]) == (1.5, 4.0, 2.0)
    nothing = json.loads((tally.line(now=104.0) or "")[len(MARK) :])
    assert nothing["rank0_per_s"] == 0 and nothing["senders_per_s"] == 0


def test_counts_from_many_threads_add_up() -> None:
    tally = StoreTally()
    store = tally.sender_store(HashStore())

    def send() -> None:
        for _ in range(500):
            store.add("seq", 1)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.senders["add"] == 4000 == store.add("seq", 0)
