"""The tqdm hook: rank 0's outermost open bar drives the job's progress."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from jupyter_disttrain.runtime import report, tqdm_hook
from tests.runtime.test_report import progress


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """tqdm's bars with the hook, undone after the test."""
    from tqdm import std

    monkeypatch.setattr(std.tqdm, "refresh", std.tqdm.refresh)
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


def test_a_bar_class_that_draws_itself_reports_too(
    rank0: None, hooked: type, capsys: pytest.CaptureFixture[str]
) -> None:
    from tqdm import std

    class Drawn(std.tqdm):  # type: ignore[misc]
        """Draws elsewhere, as the notebook and rich bars do (display overridden)."""

        def display(self, *args: object, **kwargs: object) -> bool:
            return True

    for _ in Drawn(range(6), mininterval=0):
        pass
    assert progress(capsys.readouterr().out)[-1] == (6, 6)
