"""The debugger console in a real browser (JupyterLab, then Notebook 7, on 127.0.0.1,
Debian's Chromium).

A notebook runs a 2x2 local job whose rank 1 stops at ``breakpoint()``: the
dashboard says Paused and where, once; ``%distrain_debug`` opens the console,
which shows the frame's source with the current line, answers ``p step`` then
``p rank`` typed in its input line (the oldest answer first) and, in the dark
theme, ``p total`` below them; Continue lets the job finish, announced as an
end apart from the pause's notice, and the console's controls go disabled with
no rank left paused. The console's screenshots, in the light and the dark
theme, land in ``test-output/debug/`` (the README's pictures,
``docs/debug-console.png`` and ``docs/debug-console-dark.png``) and
``test-output/debug-notebook7/``.
"""

from __future__ import annotations

import pytest

from .conftest import REPO, Lab
from .harness import page_errors, run_harness, write_notebook

OUTPUT = REPO / "test-output" / "debug"

CELLS = [
    "%load_ext jupyter_disttrain",
    """%%distrain --nodes 2 --nproc 2 --name browser-debug
import torch, torch.distributed as dist

rank = dist.get_rank()
total = 0.0
for step in range(3):
    x = torch.ones(2, 3) * (step + 1)
    if rank == 1 and step == 1:
        breakpoint()
    t = torch.tensor([float(step)])
    dist.all_reduce(t)
    total += t.item()
total""",
    "%distrain_debug browser-debug --rank 1",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("app", ["lab", "notebook7"])
def test_debug_console(
    app: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    server: Lab = request.getfixturevalue(app)
    monkeypatch.setenv("DEBUG_APP", "notebook" if app == "notebook7" else "lab")
    output = OUTPUT if app == "lab" else OUTPUT.with_name("debug-notebook7")
    notebook = write_notebook(server.root, "debug.ipynb", CELLS)
    result = run_harness("debug.mjs", server, notebook, output)

    assert result["paused"]["note"] == "rank 1 paused at cell:9 in <module>"
    states = {row["rank"]: row["state"] for row in result["paused"]["rows"]}
    assert states == {0: "Running", 1: "Paused", 2: "Running", 3: "Running"}
    assert result["where"] == "rank 1 at cell:9 in <module>"
    assert result["current"].strip() == "9 ->     t = torch.tensor([float(step)])"
    assert "(Pdb) p step" in result["answer"] and result["answer"].rstrip().endswith("1")
    history = result["history"]  # oldest first: the first command's answer stays on top
    assert len(history) == 2, history
    assert "(Pdb) p step" in history[0] and "(Pdb) p rank" in history[1], history
    assert history[1].rstrip().endswith("1"), history  # rank 1 answered with its own rank
    dark = result["darkHistory"]  # in the dark theme, the third answer below the first two
    assert len(dark) == 3 and dark[:2] == history and "(Pdb) p total" in dark[2], dark
    read = result["darkHistoryContrast"]
    assert read["checked"] > 5 and not read["found"], read
    assert result["final"] == "Succeeded"
    assert result["afterStatus"] == 1
    # the pause said once, its markup not escaped; no rank paused: nothing can be sent
    assert result["paused"]["notes"] == 1 and not result["paused"]["escaped"], result["paused"]
    assert result["paused"]["said"] == 1, result["paused"]
    # a pause is announced as a pause, and the end of the job once, as an end
    toasts = result["toasts"]
    pause = "Training job browser-debug paused: rank 1 paused at cell:9"
    assert any(pause in t for t in toasts), toasts
    assert any("Training job browser-debug succeeded" in t for t in toasts), toasts
    assert not any("training jobs ended" in t for t in toasts), toasts
    controls = result["afterControls"]
    assert controls == {"options": 0, "send": True, "continue": True, "input": True}, controls

    errors = page_errors(result)
    assert not errors, errors
    assert result["lightInk"] != result["darkInk"], result  # the console follows the theme
    for theme in ("lightContrast", "darkContrast"):  # its text at least 4.5:1 on its background
        read = result[theme]
        assert read["checked"] > 5 and not read["found"], (theme, read)
    for name in ("debug-console.png", "debug-console-dark.png"):
        assert (output / name).stat().st_size > 10_000
