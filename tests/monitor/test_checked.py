"""Snapshots read back from JSON: every field checked against the shape's type hints."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.monitor.checked import ShapeError, check, checked_snapshot


def snapshot_json() -> dict[str, Any]:
    monitor = JobMonitor("shape", "local", 2, nodes=1, nproc=2)
    monitor.feed(ev.job_event("Running", "Started", "ok", t=1.0))
    monitor.feed(ev.Event("metric", 0, 2.0, {"step": 1, "values": {"loss": float("nan")}}))
    monitor.feed(ev.Event("checkpoint", 0, 3.0, {"step": 1, "uri": "/c/1", "bytes": 5}))
    data: dict[str, Any] = json.loads(json.dumps(monitor.snapshot(4.0)))
    return data


def test_a_monitor_snapshot_through_json_is_a_snapshot() -> None:
    data = snapshot_json()
    assert checked_snapshot(data) is data


def test_a_cause_recorded_with_its_old_field_name_is_read() -> None:
    """View records written before the cause's class was named ``category`` say ``kind``."""
    data = snapshot_json()
    old = {"rank": 1, "kind": "raised", "reason": "ValueError: x", "consequences": [0]}
    data["cause"] = {**old, "line": "rank 1 raised ValueError: x"}
    cause = checked_snapshot(data)["cause"]
    assert cause is not None and cause["category"] == "raised" and "kind" not in cause
    data["cause"] = {**old, "kind": 3, "line": "rank 1"}
    with pytest.raises(ShapeError, match=r"snapshot\.cause: .* is none of"):
        checked_snapshot(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("ranks"), "snapshot: missing ranks"),
        (lambda d: d.update(extra=1), "snapshot: unknown extra"),
        (lambda d: d.update(stalled=1), "snapshot.stalled: 1 is not of type bool"),
        (lambda d: d.update(world_size=True), "snapshot.world_size: True is not of type int"),
        (lambda d: d["ranks"][1].update(step="2"), r"snapshot.ranks\[1\].step: '2' is none of"),
        (lambda d: d["checkpoints"].append([1]), r"snapshot.checkpoints\[1\]: \[1\] is not an"),
        (lambda d: d["metrics"].update(loss=None), "snapshot.metrics.loss: None is not an"),
    ],
)
def test_a_field_of_another_type_is_named(change: Any, message: str) -> None:
    data = snapshot_json()
    change(data)
    with pytest.raises(ShapeError, match=message):
        checked_snapshot(data)


def test_literals_and_floats() -> None:
    check(3, float, "x")  # a JSON integer is a float
    check("a", Literal["a", "b"], "x")
    with pytest.raises(ShapeError, match="x: 'c' is not one of"):
        check("c", Literal["a", "b"], "x")
    with pytest.raises(ShapeError, match="x: False is not of type float"):
        check(False, float, "x")
