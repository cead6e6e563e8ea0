"""A ``%%distrain`` cell's lines against the workers' source (what transform_cell keeps)."""

from __future__ import annotations

from jupyter_disttrain.dap import cells
from jupyter_disttrain.payload import transform_cell

CELL = "%%distrain --nodes 2\n\n\nx = 1\ny = 2\n"


def test_cell_lines_map_to_the_transformed_source_and_back() -> None:
    worker = transform_cell(cells.body_of(CELL)).splitlines()
    assert cells.shift(CELL) == 3
    assert worker[cells.to_worker(CELL, 5) - 1] == "y = 2"  # type: ignore[operator]
    assert cells.to_cell(CELL, 2) == 5
    assert cells.to_worker(CELL, 1) is None and cells.to_worker(CELL, 3) is None


def test_breakpoints_keep_conditions_and_drop_the_magic_line() -> None:
    spots = [{"line": 1}, {"line": 4, "condition": "x > 0"}, {"line": 5, "condition": ""}]
    assert cells.worker_breakpoints(CELL, spots) == [
        {"line": 1, "condition": "x > 0"},
        {"line": 2, "condition": None},
    ]


def test_which_cells_run_as_jobs() -> None:
    assert cells.same_cell(CELL, "\n\nx = 1\ny = 2")
    assert not cells.same_cell(CELL, "x = 1\n")
    assert cells.is_distrain_cell("%%distrain --session s\nx = 1")  # run on a session's ranks
    assert not cells.is_distrain_cell("%%distrainer\nx")
    assert cells.is_distrain_cell("%%distrain\nx")


def test_the_running_cell_of_a_stack_is_the_newest_cell_file() -> None:
    assert cells.is_cell_file("<distrain-cell>") and cells.is_cell_file("<distrain-cell-12>")
    assert not cells.is_cell_file("<distrain-cell-x>") and not cells.is_cell_file("cell.py")
    files = ["<distrain-cell-9>", "/lib/torch.py", "<distrain-cell-12>", "<distrain-cell-3>"]
    assert cells.newest_cell_file(files) == "<distrain-cell-12>"
    assert cells.newest_cell_file(["<distrain-cell>", "/lib/x.py"]) == "<distrain-cell>"
    assert cells.newest_cell_file(["/lib/x.py"]) is None
