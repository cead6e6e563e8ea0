"""``report(step=..., total=...)`` and the tqdm hook: rank 0's progress lines."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from jupyter_disttrain.events import Event, parse_line
from jupyter_disttrain.runtime import report, tqdm_hook


@pytest.fixture
def rank0(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rank 0 with a fresh rate limit and no explicit total yet."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(report, "_progress_sent", -report.PROGRESS_EVERY)
    monkeypatch.setattr(report, "_progress_pending", None)
    monkeypatch.setattr(report, "explicit_total", False)
    monkeypatch.setattr(tqdm_hook, "_followed", None)
    yield


def lines(out: str) -> list[Event]:
    return [parse_line(line, None) for line in out.splitlines()]


def progress(out: str) -> list[tuple[int, int]]:
    return [(e.get("step"), e.get("total")) for e in lines(out) if e.kind == "progress"]


def test_total_is_the_progress_not_a_metric(
    rank0: None, capsys: pytest.CaptureFixture[str]
) -> None:
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


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """tqdm's console bar with the hook, undone after the test."""
    from tqdm import std

    monkeypatch.setattr(std.tqdm, "display", std.tqdm.display)
    monkeypatch.setattr(std.tqdm, "close", std.tqdm.close)
    monkeypatch.setattr(std.tqdm, "_distrain_hooked", False, raising=False)
    assert tqdm_hook.install() and tqdm_hook.install()  # idempotent
    yield std.tqdm


def test_tqdm_bar_reports_its_count_and_the_outer_bar_wins(
    rank0: None, hooked: type, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report, "PROGRESS_EVERY", 0.0)
    tqdm = hooked
    sink = io.StringIO()
    for _epoch in tqdm(range(2), file=sink, mininterval=0):
        for _batch in tqdm(range(5), file=sink, mininterval=0, leave=False):
            pass
    got = progress(capsys.readouterr().out)
    assert got and all(total == 2 for _, total in got), got  # the inner bars are not followed
    assert got[0] == (0, 2) and got[-1] == (2, 2)
    # with the outer bar closed, the next bar is followed; one without a total never is
    for _ in tqdm(iter(range(3)), file=sink, mininterval=0):
        pass
    for _ in tqdm(range(4), file=sink, mininterval=0):
        pass
    assert progress(capsys.readouterr().out)[-1] == (4, 4)


def test_report_total_wins_over_a_bar(
    rank0: None, hooked: type, capsys: pytest.CaptureFixture[str]
) -> None:
    report.report(step=0, total=50, loss=1.0)
    for _ in hooked(range(3), file=io.StringIO(), mininterval=0):
        pass
    assert progress(capsys.readouterr().out) == [(1, 50)]


def test_the_hook_is_installed_when_the_cell_or_its_functions_name_tqdm() -> None:
    assert tqdm_hook.uses_tqdm("from tqdm.auto import tqdm\n", [])
    assert tqdm_hook.uses_tqdm("train()", [b"\x80\x05...tqdm..."])
    assert not tqdm_hook.uses_tqdm("for i in range(3): pass", [b"\x80\x05..."])
