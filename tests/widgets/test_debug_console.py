"""The debugger console without a paused rank, its history's order, and its threads."""

from __future__ import annotations

import threading

from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.job import Job
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.widgets.debug_console import DebugConsole


def test_with_no_rank_paused_nothing_can_be_sent_and_answers_read_oldest_first() -> None:
    console = DebugConsole(Job(JobSpec("dbg", nodes=1, nproc=2), LocalBackend()))
    assert console.ranks.options == () and console.ranks.value is None
    assert console.send_button.disabled and console.continue_button.disabled
    assert console.line.disabled and "no rank is paused" in console.status.value
    for line in ("p first", "p second"):
        console.submit(line).join(30)
    text = console.answers.value
    assert text.index("(Pdb) p first") < text.index("(Pdb) p second"), text


def test_a_refresh_on_another_thread_waits_for_the_pages_pick() -> None:
    """A pause or resume refreshes the rank selector on a thread of its own while the page's
    pick is applied on the kernel thread: the refresh waits until the pick is applied."""
    console = DebugConsole(Job(JobSpec("dbg", nodes=1, nproc=2), LocalBackend()))
    started, refreshed = threading.Event(), threading.Event()
    during: list[bool] = []

    def refresh() -> None:
        started.set()
        console.refresh()
        refreshed.set()

    def on_pick(_change: object) -> None:  # runs inside set_state, on the kernel thread
        threading.Thread(target=refresh, daemon=True).start()
        started.wait(5)
        during.append(refreshed.wait(0.3))

    console.ranks.observe(on_pick, "tooltip")
    console.ranks.set_state({"tooltip": "a pick"})
    assert refreshed.wait(10), "the refresh went on once the pick was applied"
    assert during == [False], "the refresh ran while the page's pick was applied"
