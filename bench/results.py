"""Write one benchmark's section of BENCHMARKS.md, leaving the others as they are."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

HEADER = (
    "# Benchmarks\n\nMeasured, not asserted: each section is rewritten by the script named in it "
    "(`make bench` runs them all). Figures are from the machine named in each section.\n"
)


def write_section(path: Path, title: str, body: str) -> None:
    """Replace (or append) the ``## title`` section of ``path`` with ``body``."""
    text = path.read_text() if path.exists() else HEADER
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


def machine() -> str:
    """The machine a section's figures come from: system, architecture, CPUs, Python."""
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs (shared), "
        f"Python {platform.python_version()}"
    )


def publish(text: str, section: str | None, intro: str) -> None:
    """Print ``text`` (a table) after the machine's load; with ``section``, make ``intro``
    then ``text`` that section of BENCHMARKS.md (:func:`write_section`)."""
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()}")
    print(text)
    if section is not None:
        write_section(
            Path(__file__).resolve().parents[1] / "BENCHMARKS.md", section, intro + "\n\n" + text
        )
