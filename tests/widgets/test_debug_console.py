"""The debugger console without a paused rank, and its history's order."""

from __future__ import annotations

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
