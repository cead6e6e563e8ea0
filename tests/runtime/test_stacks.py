"""A rank's stacks: read from another thread, named by the call and cell line it is in."""

from __future__ import annotations

import threading
import time

from jupyter_disttrain.runtime import stacks
from jupyter_disttrain.runtime.cell import register_source

CELL = "<distrain-cell>"
SOURCE = """import time
def work(ev):
    ev.set()
    time.sleep(30)
"""


def test_a_thread_blocked_in_c_is_named_by_the_call_at_its_cell_line() -> None:
    register_source(SOURCE, CELL)
    namespace: dict[str, object] = {}
    exec(compile(SOURCE, CELL, "exec"), namespace)
    ready = threading.Event()
    worker = threading.Thread(target=namespace["work"], args=(ready,), name="sleeper", daemon=True)
    worker.start()
    assert ready.wait(5)
    deadline = time.monotonic() + 30  # until it reached the sleep (a loaded machine is slow)
    found = {s["name"]: s for s in stacks.all_stacks(CELL)}
    while found["sleeper"]["call"] != "time.sleep" and time.monotonic() < deadline:
        time.sleep(0.05)
        found = {s["name"]: s for s in stacks.all_stacks(CELL)}
    sleeper = found["sleeper"]
    assert sleeper["call"] == "time.sleep" and sleeper["cell_line"] == 4, sleeper
    assert sleeper["frames"][-1] == [CELL, 4, "work"]
    assert not sleeper["main"]
    assert found["MainThread"]["main"] and found["MainThread"]["cell_line"] is None


def test_the_call_below_the_cell_skips_wrappers() -> None:
    source = "def outer():\n    return wrapper()\n"
    register_source(source, CELL)
    seen: list[stacks.ThreadStack] = []

    def all_reduce() -> None:
        frame = __import__("sys")._getframe()
        seen.append(stacks.thread_stack("t", frame, CELL, main=True))

    def wrapper() -> None:
        all_reduce()

    namespace: dict[str, object] = {"wrapper": wrapper}
    exec(compile(source, CELL, "exec"), namespace)
    namespace["outer"]()  # type: ignore[operator]
    assert seen[0]["call"] == "all_reduce" and seen[0]["cell_line"] == 2


def test_no_collectives_are_known_without_a_process_group() -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()
    assert stacks.last_collective() is None
