"""The launcher's socket is this user's alone from the moment it exists: a process that
finds it (a kernel connecting to a lingering launcher as it starts) never sees it open
to others, which it would take for another user's socket."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def first_sight(path: Path, proc: subprocess.Popen[bytes]) -> int:
    """The socket's mode when it is first seen (the launcher is polled as it binds)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return stat.S_IMODE(os.lstat(path).st_mode)
        except FileNotFoundError:
            continue
    raise AssertionError(f"no socket at {path} (launcher exit code {proc.poll()})")


def test_the_socket_is_bound_private() -> None:
    for _ in range(5):
        folder = Path(tempfile.mkdtemp(prefix="zy-", dir="/tmp"))
        path = folder / "launcher.sock"
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_disttrain.runtime.zygote", str(path), "--linger", "1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            mode = first_sight(path, proc)
        finally:
            proc.kill()
            proc.wait()
            for leftover in folder.iterdir():
                leftover.unlink()
            folder.rmdir()
        assert mode & 0o077 == 0, oct(mode)
