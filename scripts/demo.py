"""Run a tutorial notebook headless in a real kernel and print what its user would see.

``python scripts/demo.py notebooks/01-quickstart.ipynb``: each code cell's
source (abridged) and its outputs as text, in order, then the wall time.
Exits non-zero if a cell raises.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def output_text(output: dict[str, Any]) -> str:
    """The text a user sees for one output."""
    kind = output.get("output_type")
    if kind == "stream":
        return str(output.get("text", ""))
    if kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        return str(data.get("text/plain", ""))
    if kind == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    return ""


def show_cell(cell: Any, index: int, seconds: float) -> None:
    """Print one executed cell: its first source lines, then its outputs."""
    lines = cell.source.splitlines()
    head = "\n".join(f"    {line}" for line in lines[:3])
    more = f"\n    ... ({len(lines) - 3} more lines)" if len(lines) > 3 else ""
    print(f"--- cell {index} ({seconds:.1f} s)\n{head}{more}")
    for output in cell.get("outputs", []):
        text = output_text(output).rstrip()
        if text:
            print(text)
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Execute the notebook given on the command line."""
    if len(argv) != 1:
        print("usage: demo.py NOTEBOOK", file=sys.stderr)
        return 2
    path = Path(argv[0])
    nb = nbformat.read(path, as_version=4)
    started = time.monotonic()
    client = NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(path.parent)}})
    print(f"running {path} on the local backend (headless kernel)\n")
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t0 = time.monotonic()
            try:
                client.execute_cell(cell, index)
            except CellExecutionError:
                show_cell(cell, index, time.monotonic() - t0)
                print(f"\ncell {index} raised; see above", file=sys.stderr)
                return 1
            show_cell(cell, index, time.monotonic() - t0)
    print(f"\nwall time: {time.monotonic() - started:.1f} s (kernel start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
