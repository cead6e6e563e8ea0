"""What a signed worker line may say (linecheck.py): the lines the runtime writes are believed."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from jupyter_disttrain.linecheck import Shape, problem
from jupyter_disttrain.runtime import report

SHAPE = Shape(world_size=2, nodes=1, nproc=2)


def written(kind: str, **fields: object) -> dict[str, object]:
    """The fields of the protocol line the runtime's ``report.emit`` writes."""
    out = io.StringIO()
    with redirect_stdout(out):
        report.emit(kind, **fields)
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("##distrain "))
    return dict(json.loads(line.split(" ", 2)[1]))


@pytest.mark.parametrize("phase", [{"phase": "start"}, {"phase": "end", "status": "error"}])
def test_a_session_cell_line_as_the_runtime_writes_it_is_believed(phase: dict[str, str]) -> None:
    fields = written("cell", id=3, **phase)
    assert fields["id"] == 3  # the cell's number, not text
    assert problem("cell", 1, 1_700_000_000.0, fields, SHAPE) is None


def test_a_cell_line_with_a_negative_or_odd_id_is_not() -> None:
    for bad in (-1, True, 1.5, ["x"]):
        assert problem("cell", 0, 1_700_000_000.0, {"id": bad}, SHAPE) is not None, bad


def test_a_paused_line_needs_a_port_and_bounded_fields() -> None:
    good = {"file": "<distrain-cell>", "line": 9, "function": "f", "port": 4242, "pid": 7}
    assert problem("paused", 1, 1_700_000_000.0, good, SHAPE) is None
    for bad in ({"port": 0}, {"port": 70000}, {"line": -1}, {"file": "x" * 5000}):
        assert problem("paused", 1, 1_700_000_000.0, {**good, **bad}, SHAPE) is not None, bad
    assert problem("resumed", 1, 1_700_000_000.0, {}, SHAPE) is None
    assert problem("paused", 2, 1_700_000_000.0, good, SHAPE) is not None  # not a rank
