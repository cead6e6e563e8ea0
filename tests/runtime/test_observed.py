"""Rank 0's observers of protocol lines: its own lines as it signed them, relayed lines
verified and parsed once for all of them; the metrics endpoint's registry reads them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import jobkey, report
from jupyter_disttrain.runtime.metrics_server import Registry
from jupyter_disttrain.runtime.observed import Observed, from_line, observed
from tests.signing import key_file, line


@pytest.fixture
def seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[Observed]]]:
    """Two observers' lists of what they were handed, with the job key in place."""
    monkeypatch.setenv(jobkey.ENV_KEY_FILE, str(key_file(tmp_path)))
    lists: list[list[Observed]] = [[], []]
    observers = [lists[0].append, lists[1].append]
    for observer in observers:
        report.add_observer(observer)
    try:
        yield lists
    finally:
        for observer in observers:
            report._observers.remove(observer)


def test_a_relayed_line_is_verified_and_parsed_once_for_every_observer(
    seen: list[list[Observed]],
) -> None:
    good = line("metric", 3, step=7, values={"loss": 0.5, "flag": True, "name": "x"})
    forged = good.rsplit(" ", 1)[0] + " " + "0" * 64
    report.write_lines([good, forged, "plain text", ""], echo=False)
    first, second = seen
    assert first == [Observed("metric", 3, step=7, values={"loss": 0.5})]
    assert second[0] is first[0]  # one reading handed to both


def test_rank_0s_own_line_is_handed_over_as_it_signed_it(
    seen: list[list[Observed]], capsys: pytest.CaptureFixture[str]
) -> None:
    report.emit_as(0, "progress", step=2, total=8)
    report.emit_as(0, "progress", step=2, total=0)  # no total known
    first, _ = seen
    assert first == [Observed("progress", 0, step=2, total=8), Observed("progress", 0, step=2)]
    assert capsys.readouterr().out.count("##distrain") == 2  # written to the log as before


def test_fields_of_the_wrong_type_are_left_out() -> None:
    assert observed("metric", "0", {}) is None
    assert observed("metric", True, {}) is None
    got = observed("metric", 1, {"step": 2.5, "total": -1, "values": {"a": "1", "b": 2}})
    assert got == Observed("metric", 1, values={"b": 2.0})
    assert from_line(line("metric", 0, values={"a": 1}), None) is None  # no key: nothing


def test_the_registry_renders_what_it_observed() -> None:
    registry = Registry()
    registry.observe(Observed("metric", 1, step=4, values={"loss/train": 0.25}))
    registry.observe(Observed("progress", 1, step=5, total=9))  # not a metric
    text = registry.render()
    assert 'disttrain_loss_train{rank="1"} 0.25' in text
    assert 'disttrain_step{rank="1"} 4' in text
    assert 'disttrain_reports_total{rank="1"} 1' in text
