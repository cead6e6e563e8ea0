"""run_cell: sys.exit in a cell behaves as in a script."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_disttrain.runtime.cell import run_cell


@pytest.mark.parametrize("call", ["sys.exit()", "sys.exit(0)", "sys.exit(None)", "exit()"])
def test_a_clean_exit_ends_the_cell_as_a_success(call: str) -> None:
    ns: dict[str, Any] = {}
    assert run_cell(f"import sys\nran = 1\n{call}\nran = 2\nran", ns) is None
    assert ns["ran"] == 1  # nothing after the exit ran


@pytest.mark.parametrize(
    ("call", "code"), [("sys.exit(1)", 1), ("sys.exit('bad data')", "bad data")]
)
def test_any_other_exit_is_the_cells_failure(call: str, code: object) -> None:
    with pytest.raises(SystemExit) as raised:
        run_cell(f"import sys\n{call}", {})
    assert raised.value.code == code
