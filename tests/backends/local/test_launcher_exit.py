"""A process that exits while a launcher of its own starts leaves no launcher and no folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

#: Starts a launcher from a background thread, never closes it, and exits.
UNCLOSED = """
import threading
from jupyter_disttrain.backends.local.launcher import Launcher
started = threading.Event()
def start():
    print(Launcher().pid, flush=True)
    started.set()
threading.Thread(target=start, daemon=True).start()
assert started.wait(60)
"""

#: ``%load_ext``'s prewarm (no lingering launcher: one of its own), then an exit at once.
PREWARMED = """
from jupyter_disttrain.backends.local.launcher import prewarm
prewarm(0)
"""


def run_in(tmp: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def launcher_alive(pid: int) -> bool:
    try:
        return "jupyter_disttrain.runtime.zygote" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def test_a_launcher_started_from_a_thread_ends_with_its_process(tmp_path: Path) -> None:
    done = run_in(tmp_path, UNCLOSED)
    pid = int(done.stdout.split()[0])
    assert not launcher_alive(pid), done.stderr
    assert list(tmp_path.iterdir()) == [], done.stderr


def test_an_exit_right_after_prewarm_leaves_no_launcher_folder(tmp_path: Path) -> None:
    done = run_in(tmp_path, PREWARMED)
    assert list(tmp_path.iterdir()) == [], done.stderr
    assert "Traceback" not in done.stderr, done.stderr
