"""Script launchers and main guards in a %%distrain cell, found before anything runs."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import service as jobs
from jupyter_disttrain.cellcheck import main_guard_note, spawn_problem

#: The PyTorch DDP tutorial's launcher, pasted into a cell.
TUTORIAL = textwrap.dedent(
    """
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def demo_basic(rank, world_size):
        print(rank, world_size)

    def run_demo(demo_fn, world_size):
        mp.spawn(demo_fn, args=(world_size,), nprocs=world_size, join=True)

    if __name__ == "__main__":
        run_demo(demo_basic, 4)
    """
)


@pytest.mark.parametrize(
    ("source", "line", "call"),
    [
        (TUTORIAL, 9, "demo_fn(dist.get_rank(), world_size)"),
        ("import torch\ntorch.multiprocessing.spawn(train, nprocs=2)", 2, "train(dist.get_rank())"),
        (
            "from torch.multiprocessing import spawn as sp\nsp(f, (1, 2))",
            2,
            "f(dist.get_rank(), 1, 2)",
        ),
        (
            "from torch import multiprocessing as tmp\ntmp.start_processes(g, args=a)",
            2,
            "g(dist.get_rank(), *a)",
        ),
    ],
)
def test_a_launcher_in_the_cell_is_named_with_the_call_to_make(
    source: str, line: int, call: str
) -> None:
    problem = spawn_problem(source)
    assert problem is not None
    assert problem.startswith(f"line {line}: ")
    assert "already runs on every rank" in problem
    assert f"\n    {call}\n" in problem


@pytest.mark.parametrize(
    "source",
    [
        "import multiprocessing as mp\nmp.spawn = 1\nx = mp.Process(target=f)",
        "import subprocess\nsubprocess.run(['spawn'])",
        "def spawn(x):\n    return x\nspawn(1)",
        "def f(:\n",  # a syntax error is the cell's own, reported where it runs
    ],
)
def test_other_cells_pass(source: str) -> None:
    assert spawn_problem(source) is None


def test_a_main_guard_is_a_note_that_it_runs_on_every_rank() -> None:
    note = main_guard_note(TUTORIAL)
    assert note is not None and note.startswith('warning: line 11: `if __name__ == "__main__":`')
    assert "runs on every rank" in note
    assert main_guard_note("x = 1\nif __name__ == 'other':\n    pass") is None


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    assert ip.extension_manager is not None
    ip.extension_manager.load_extension("jupyter_disttrain")
    yield ip


def test_the_magic_refuses_a_spawning_cell_before_launch(shell: InteractiveShell) -> None:
    before = set(jobs.default_service().registered())
    with pytest.raises(UsageError, match=r"line 8: mp\.spawn\(\.\.\.\) starts processes itself"):
        shell.run_cell_magic("distrain", "--nproc 2 --name spawn-cell", TUTORIAL.lstrip())
    assert set(jobs.default_service().registered()) == before


def test_the_magic_notes_a_main_guard(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("distrain", "--nproc 1 --dry-run", 'if __name__ == "__main__":\n    1')
    assert 'warning: line 1: `if __name__ == "__main__":` is true on every rank' in (
        capsys.readouterr().out
    )
