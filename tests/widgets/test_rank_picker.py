"""The rank picker of a large job's dashboard (rank_picker.py)."""

from __future__ import annotations

from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.widgets.rank_picker import MAX_OPENED, RankPicker


def test_typed_ranks_open_and_a_wrong_entry_says_why() -> None:
    asked: list[int] = []
    picker = RankPicker(4096, on_change=lambda: asked.append(1))
    assert picker.widget.layout.display == ""  # a large job shows it
    picker.pick("517, 2048-2050")
    assert picker.opened == [517, 2048, 2049, 2050] and asked
    picker.pick("5000")
    assert picker.opened == [517, 2048, 2049, 2050]  # kept
    assert "is not within the job&#x27;s ranks 0-4095" in picker.error.value
    picker.pick(f"0-{MAX_OPENED}")
    assert f"open at most {MAX_OPENED} at once" in picker.error.value
    picker.pick("")
    assert picker.opened == [] and picker.error.value == ""


def test_a_small_job_hides_it_until_its_ranks_say_it_is_large() -> None:
    picker = RankPicker(8)
    assert picker.widget.layout.display == "none"
    mon = JobMonitor("j", "local", 64, nodes=8, nproc=8)
    picker.render(mon.snapshot())
    assert picker.widget.layout.display == ""
