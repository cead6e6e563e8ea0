"""The live text views (textview.py): rank 0's progress in ``lines`` mode."""

from __future__ import annotations

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.job import Job
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.textview import LiveView

T0 = 1_800_000_000.0


def running_in_lines_mode(name: str, nproc: int) -> tuple[Job, LiveView]:
    """A running job of one node with a ``lines`` view attached (it prints to stdout)."""
    job = Job(JobSpec(name, nodes=1, nproc=nproc), LocalBackend())
    view = LiveView("lines")
    job.add_listener(view.on_event)
    view.attach(job)
    job.feed(ev.job_event("Running", t=T0))
    return job, view


def test_lines_mode_prints_progress_each_tenth(capsys: pytest.CaptureFixture[str]) -> None:
    job, view = running_in_lines_mode("lines", 1)
    for step in range(1, 26):
        job.feed(ev.Event("progress", 0, T0 + step, {"step": step, "total": 25}))
        job.feed(ev.Event("resources", 0, T0 + step, {"cpu_pct": 50.0}))
    job.feed(ev.job_event("Succeeded", t=T0 + 30))
    view.close()
    out = capsys.readouterr().out.splitlines()
    printed = [line for line in out if line.startswith("progress: ")]
    assert printed and printed[-1] == "progress: 25 of 25 steps (100%), done", out
    assert len(printed) <= 11, out  # at most once per tenth, however many lines arrive
    assert all(line.startswith(("job ", "progress: ")) for line in out), out  # no samples


def test_lines_mode_survives_metrics_that_are_not_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job, view = running_in_lines_mode("odd-metrics", 1)
    odd: list[dict[str, object]] = [
        {"step": 0, "values": {"acc": "high", "loss": 0.5}},
        {"step": "ten", "values": {"loss": None}},
        {"step": 20, "values": [1, 2]},
        {"step": 30, "values": {"nested": {"a": 1}, "flag": True}},
    ]
    for fields in odd:
        job.feed(ev.Event("metric", 0, T0 + 1, fields))
    job.feed(ev.Event("log", 0, T0 + 2, {"text": "still printing"}))
    job.feed(ev.job_event("Succeeded", t=T0 + 3))
    view.close()
    out = capsys.readouterr().out.splitlines()
    assert "[rank 0] step 0: acc='high' loss=0.5" in out, out
    assert "[rank 0] step ten: loss=None" in out, out
    assert "[rank 0] step 20: values=[1, 2]" in out, out
    assert "[rank 0] step 30: nested={'a': 1} flag=True" in out, out
    assert "[rank 0] still printing" in out and out[-1] == "job Succeeded", out


def test_a_shown_job_is_kept_as_underscore_not_echoed() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns["JOB"] = Job(JobSpec("kept", nodes=1, nproc=1), LocalBackend())
    shell.user_ns["HIDDEN"] = Job(JobSpec("hidden", nodes=1, nproc=1), LocalBackend())
    shell.user_ns["LiveView"] = LiveView
    shown = shell.run_cell('LiveView("text").cell_value(JOB, get_ipython())', store_history=True)
    job = shell.user_ns["JOB"]
    assert shown.result is None  # nothing echoed as Out[n]
    count = shown.execution_count
    assert shell.user_ns["_"] is job and shell.user_ns["Out"][count] is job
    assert shell.user_ns[f"_{count}"] is job
    hidden = shell.run_cell('LiveView("none").cell_value(HIDDEN, get_ipython())')
    assert hidden.result is shell.user_ns["HIDDEN"]  # nothing else shows it: echoed


def test_lines_mode_prints_a_redrawn_bar_once_as_a_terminal_leaves_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tqdm bar arrives as one ``\\r`` line per redraw; lines mode prints its last
    redraw once, when the rank prints another line or the job ends."""
    job, view = running_in_lines_mode("bars", 2)
    for i in range(1, 101):
        job.feed(ev.Event("log", 0, T0 + i / 100, {"text": f"\r{i}%|#"}))
        job.feed(ev.Event("log", 1, T0 + i / 100, {"text": f"\r{i}/100"}))
    job.feed(ev.Event("log", 0, T0 + 2, {"text": "epoch done"}))
    job.feed(ev.job_event("Succeeded", t=T0 + 3))
    view.close()
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "job Running",
        "[rank 0] 100%|#",
        "[rank 0] epoch done",
        "[rank 1] 100/100",
        "job Succeeded",
    ], out
