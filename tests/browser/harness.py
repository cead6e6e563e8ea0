"""Running a browser-test notebook through a Node harness script (shared by the browser tests)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nbformat

from .conftest import HERE, Lab


def write_notebook(root: Path, name: str, cells: list[str]) -> str:
    """Write ``cells`` as notebook ``name`` (python3 kernelspec) under ``root``; its path."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, root / name)
    return name


def run_harness(script: str, lab: Lab, notebook: str, output: Path, *args: str) -> dict[str, Any]:
    """Run ``node script URL NOTEBOOK OUTPUT [ARGS]``; the JSON it printed (failing on its
    error)."""
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    node = shutil.which("node")
    assert node is not None, "node is needed for the browser test"
    proc = subprocess.run(
        [node, str(HERE / script), lab.url, notebook, str(output), *args],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=840,  # under the longest test's own timeout (900 s), which then reports it
    )
    (output / "harness.log").write_text(proc.stdout + proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the browser harness:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in result, (
        f"{result['error']}\nconsole: {result['console']}\n"
        f"thrown at: {result.get('throwSites', [])}\n"
        f"the page read: {result.get('pageText', '')!r}\n"
        f"the harness said: {proc.stderr[-3000:]}"
    )
    return result


#: anywidget's own rejection when a model's front end took longer than its 2-s budget to
#: initialize (a page short of CPU); the widgets open a new comm for it (widgets/reopen.py,
#: tests/browser/test_deaf_browser.py).
OVERRAN = "[anywidget] Failed to initialize model."


def page_errors(result: dict[str, Any]) -> list[str]:
    """The page errors a harness saw, less the one Notebook 7.6's own shortcuts plugin raises
    on every page with no extension enabled (its first frame in ``notebook_core``) and
    anywidget's :data:`OVERRAN`, which the widgets recover from; when there are any, then
    where the first page's uncaught exceptions were thrown (``lab.mjs``'s
    ``recordThrowSites``: a thrown string has no stack of its own)."""
    errors = [
        error
        for error in result.get("console", [])
        if error.startswith("pageerror") and not _notebook7_own(error) and OVERRAN not in error
    ]
    if errors:
        errors += [f"thrown at: {site}" for site in result.get("throwSites", [])]
    return errors


def _notebook7_own(error: str) -> bool:
    first = error.split("\n")
    return (
        first[0] == "pageerror: Cannot read properties of undefined (reading 'schema')"
        and len(first) > 2
        and "/static/notebook/notebook_core." in first[2]
    )
