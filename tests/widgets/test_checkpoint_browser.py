"""The checkpoint browser (widgets/checkpoints.py) and checkpoints on the dashboard's loss curve."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.events import Event
from jupyter_disttrain.job import Job
from jupyter_disttrain.runtime.checkpoint import api as ck
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.widgets import Dashboard
from jupyter_disttrain.widgets.checkpoint_marks import MAX_MARKS, checkpoint_points, spread
from jupyter_disttrain.widgets.checkpoints import WIDGET_MIME, CheckpointBrowser

from .dom import parse
from .streams import monitor_of


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CheckpointStore:
    directory = tmp_path / "ckpt"
    monkeypatch.setenv("DISTRAIN_CHECKPOINT_DIR", str(directory))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    losses = {10: 0.9, 20: 0.5, 30: 0.7, 40: 0.3}
    for step, loss in losses.items():
        torch.manual_seed(step)
        model = torch.nn.Linear(3, 2)
        metrics = {"loss": loss, **({"accuracy": step / 100} if step != 30 else {})}
        ck.save_checkpoint({"model": model.state_dict(), "step": step}, step, metrics)
    return CheckpointStore(str(directory))


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    return InteractiveShell.instance()


def steps(browser: CheckpointBrowser) -> list[int]:
    return [int(row["step"]) for row in browser.table.rows]


def test_table_columns_sorting_and_selection(store: CheckpointStore) -> None:
    browser = CheckpointBrowser(store)
    assert browser.table.columns == ["step", "time", "size", "loss", "accuracy", "world", "status"]
    assert steps(browser) == [40, 30, 20, 10]  # newest first
    first = browser.table.rows[0]
    assert first["cells"][3] == "0.3" and first["cells"][5] == "4" and first["status"] == "ok"
    # a header click: sort by loss ascending, then reversed
    browser.table.sort_by, browser.table.descending = "loss", False
    assert steps(browser) == [40, 20, 30, 10]
    browser.table.descending = True
    assert steps(browser) == [10, 30, 20, 40]
    browser.table.sort_by = "accuracy"  # step 30 has none: it stays last in either order
    assert steps(browser)[-1] == 30
    browser.table.descending = False
    assert steps(browser) == [10, 20, 40, 30]
    # the newest complete checkpoint is selected; a row click selects another
    assert browser.table.selected == 40
    browser.select(20)
    detail = browser.detail.value
    assert "step 20" in detail and "total parameters 8" in detail
    tensors = parse(detail).find_all(tag="tr")
    texts = [row.all_text() for row in tensors]
    assert any("model.weight" in t and "2x3" in t and "float32" in t for t in texts)
    assert "other values: step=20" in detail


def test_load_resume_and_delete(store: CheckpointStore, shell: InteractiveShell) -> None:
    job = Job(JobSpec("browse", nodes=2, nproc=2, checkpoint_dir=store.uri), LocalBackend())
    browser = CheckpointBrowser(store, job=job, shell=shell)
    browser.select(20)
    browser.var_name.value = "best_state"
    browser.load_button.click()
    assert shell.user_ns["best_state"]["step"] == 20
    assert "loaded step 20 into `best_state`" in browser.status.value
    browser.var_name.value = "not a name"
    browser.load_button.click()
    assert "not a valid Python variable name" in browser.status.value
    browser.resume_button.click()
    cell = shell.rl_next_input
    assert cell.startswith(
        f"%%distrain --nodes 2 --nproc 2 --checkpoint-dir {store.uri} --resume 20\n"
    )
    browser.delete_button.click()
    assert browser.delete_button.description == "Confirm: delete step 20"
    assert store.steps() == [10, 20, 30, 40]
    browser.delete_button.click()
    assert store.steps() == [10, 30, 40] and steps(browser) == [40, 30, 10]
    assert browser.table.selected == 40  # the selection moved to the newest


def test_damaged_rows_and_static_bundle(store: CheckpointStore) -> None:
    Path(store.info(30).uri).unlink()
    browser = CheckpointBrowser(store)
    row = next(r for r in browser.table.rows if r["step"] == 30)
    assert row["status"] == "incomplete" and "missing" in row["cells"][-1]
    browser.select(30)
    assert "incomplete" in browser.detail.value
    browser.load_button.click()
    assert "CorruptCheckpoint" in browser.status.value and "incomplete" in browser.status.value
    bundle = browser._repr_mimebundle_()
    assert bundle[WIDGET_MIME]["model_id"] == browser.widget.model_id
    assert "4 checkpoint(s)" in bundle["text/plain"] and "incomplete" in bundle["text/plain"]
    html = parse(bundle["text/html"])
    assert [r.attrs.get("data-status") for r in html.find_all(tag="tr")][1:] == [
        "ok",
        "ok",
        "incomplete",
        "ok",
    ]
    assert "export default" in browser.table._esm


def test_checkpoints_are_marked_on_the_loss_curve() -> None:
    mon = monitor_of("restart_recovery")  # a recorded job with checkpoints at steps 20 and 60
    dash = Dashboard(mon)
    marks = dash.plot.figure.layout.annotations
    assert [a.name for a in marks] == ["checkpoint-20", "checkpoint-60"]
    steps_, means = mon.mean_series("loss")
    for mark in marks:
        step = int(mark.name.split("-")[1])
        assert mark.x == step and mark.y == pytest.approx(float(means[steps_ == step][0]))
        assert "checkpoint at step" in mark.hovertext
    dash.plot.log_y.value = True
    dash.render()
    assert dash.plot.figure.layout.annotations[0].y == pytest.approx(
        math.log10(checkpoint_points(mon, "loss")[0][2])
    )
    mon.feed(Event("checkpoint", 0, 1700000099.0, {"step": 80, "uri": "/c/x", "bytes": 1}))
    dash.render()
    assert len(dash.plot.figure.layout.annotations) == 3
    dash.close()


def test_a_job_that_checkpoints_often_gets_a_bounded_number_of_marks() -> None:
    """Each change redraws every annotation in the browser: 300 checkpoints at 60 steps draw
    MAX_MARKS, spread over the run, the first and the latest among them."""
    mon = monitor_of("restart_recovery")
    dash = Dashboard(mon)
    last = max(int(a.name.split("-")[1]) for a in dash.plot.figure.layout.annotations)
    for k in range(300):
        step = last - 60 + k % 60  # steps that have a loss to sit on
        mon.feed(Event("checkpoint", 0, 1700000100.0 + k, {"step": step, "uri": f"/c/{k}"}))
    dash.render()
    drawn = [int(a.name.split("-")[1]) for a in dash.plot.figure.layout.annotations]
    steps = [step for step, _, _ in checkpoint_points(mon, "loss")]
    assert len(drawn) == MAX_MARKS < len(steps), (len(drawn), len(steps))
    assert drawn[0] == steps[0] and drawn[-1] == steps[-1] and drawn == sorted(set(drawn))
    dash.close()


def test_spread_keeps_order_ends_and_few_as_they_are() -> None:
    assert spread(list(range(5)), most=10) == [0, 1, 2, 3, 4]
    assert spread(list(range(100)), most=5) == [0, 25, 50, 74, 99]
    assert spread(list(range(41)), most=40)[-1] == 40


def test_a_table_that_heard_nothing_is_shown_anew_in_the_browser(store: CheckpointStore) -> None:
    """The table's front end heard nothing (widgets/reopen.py): it gets a new model with
    the current rows, and the browser's children name it."""
    browser = CheckpointBrowser(store)
    browser.table._unheard_seconds = 0.1
    old_id = browser.table.model_id
    browser.table._handle_custom_msg({"type": "unheard"}, [])
    assert browser.table.reopens == 1 and browser.table.model_id != old_id
    children = browser.widget.get_state()["children"]
    assert f"IPY_MODEL_{browser.table.model_id}" in children
    assert steps(browser) == [40, 30, 20, 10]
