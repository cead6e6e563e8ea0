"""A process that exits while a launcher of its own starts leaves no launcher and no folder;
one killed while its launcher runs leaves no folder either (the launcher removes its own)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
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


#: A ready launcher whose owner is then killed (a kernel past its shutdown grace).
READY = """
import time
from jupyter_disttrain.backends.local.launcher import Launcher
launcher = Launcher()
launcher.wait_ready()
print(launcher.pid, flush=True)
time.sleep(120)
"""


def test_a_launcher_whose_owner_is_killed_removes_its_folder() -> None:
    # a short folder: pytest's own would make the socket's path too long to bind
    tmp_path = Path(tempfile.mkdtemp(prefix="owner-"))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    owner = subprocess.Popen(
        [sys.executable, "-c", READY], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        assert len([p for p in tmp_path.iterdir() if p.name.startswith("distrain-")]) == 1
    finally:
        owner.kill()  # no exit handler runs: the launcher sees its stdin end, and ends
        owner.wait()
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.wait_procs([psutil.Process(pid)], timeout=30)
    assert not launcher_alive(pid)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("distrain-")] == []
    shutil.rmtree(tmp_path)


#: A launcher started and closed; prints its socket's path.
STARTED_AND_CLOSED = """
from jupyter_disttrain.backends.local.launcher import Launcher
launcher = Launcher()
launcher.wait_ready()
print(launcher.socket_path, flush=True)
launcher.close()
"""


def test_a_temporary_folder_too_deep_for_a_socket_puts_the_launcher_in_tmp(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    done = run_in(deep, STARTED_AND_CLOSED)
    socket_path = Path(done.stdout.split()[0])
    assert socket_path.parent.parent == Path("/tmp"), done.stdout
    assert not socket_path.parent.exists(), done.stdout
    # torch's compile cache (torchinductor_USER) is torch's, made as it is imported
    left = [p.name for p in deep.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == [], done.stderr
