"""``report(step=..., total=...)``: rank 0's progress lines (``total`` is no metric)."""

from __future__ import annotations

import pytest

from jupyter_disttrain.events import Event
from jupyter_disttrain.runtime import report
from tests.signing import parse


def lines(out: str) -> list[Event]:
    return [parse(line, 0) for line in out.splitlines()]


def progress(out: str) -> list[tuple[int, int]]:
    return [(e.get("step"), e.get("total")) for e in lines(out) if e.kind == "progress"]


def test_total_is_the_progress_not_a_metric(
    rank0: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report, "PROGRESS_EVERY", 600.0)  # nothing held back goes out by time
    report.report(step=0, total=3, loss=1.5)
    events = lines(capsys.readouterr().out)
    assert [e.kind for e in events] == ["metric", "progress"]
    assert events[0].metric() == {"step": 0, "values": {"loss": 1.5}}
    assert events[1].progress() == {"step": 1, "total": 3}  # step 0 done: 1 of 3
    report.report(step=1, total=3)  # within the rate limit: held back
    assert capsys.readouterr().out == ""
    report.flush_progress()
    assert progress(capsys.readouterr().out) == [(2, 3)]
    report.report(step=2, total=3.0)  # the last step always goes out
    assert progress(capsys.readouterr().out) == [(3, 3)]
    assert report.explicit_total


def test_a_held_back_step_goes_out_when_its_time_is_up_without_another_step(
    rank0: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report, "PROGRESS_EVERY", 0.2)
    report.report(step=0, total=100)
    report.report(step=1, total=100)  # held back; then the run stops stepping (a hang)
    report.report(step=2, total=100)
    timer = report._progress_timer  # None only when no step was held back (a slow machine)
    if timer is not None:
        timer.join(timeout=30)
        assert not timer.is_alive()
    sent = progress(capsys.readouterr().out)
    assert sent[0] == (1, 100) and sent[-1] == (3, 100), sent  # the last step, without a flush
    assert sent == sorted(set(sent)), sent  # each once, in order


def test_other_ranks_send_no_progress(
    rank0: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RANK", "1")
    report.report(step=4, total=10, loss=1.0)
    report.report(step=9, total=10)
    assert [e.kind for e in lines(capsys.readouterr().out)] == ["metric"]


@pytest.mark.parametrize("total", [0, -3, 2.5, "10", True])
def test_a_total_that_is_not_a_step_count_is_refused(rank0: None, total: object) -> None:
    with pytest.raises(TypeError, match="total must be a positive whole number of steps"):
        report.report(step=1, total=total, loss=1.0)


def test_no_metric_and_no_total_is_refused() -> None:
    with pytest.raises(TypeError, match=r"at least one metric or total="):
        report.report(step=1)
