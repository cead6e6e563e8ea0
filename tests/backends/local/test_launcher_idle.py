"""An idle warm launcher uses no CPU and holds one thread; what it holds in memory."""

from __future__ import annotations

import time

import psutil
import pytest

from jupyter_disttrain.backends.local.launcher import Launcher, ping

pytestmark = pytest.mark.serial  # reads a process's CPU time and memory


def settled(proc: psutil.Process) -> None:
    """Return once ``proc`` did not wake for half a second (at most 10 s of waiting)."""
    deadline = time.monotonic() + 10
    count = proc.num_ctx_switches().voluntary
    while True:
        time.sleep(0.5)
        count, last = proc.num_ctx_switches().voluntary, count
        if count == last:
            return
        assert time.monotonic() < deadline, f"still waking up after 10 s ({count} switches)"


def test_an_idle_launcher_sleeps_without_waking_up() -> None:
    launcher = Launcher()
    try:
        launcher.wait_ready()
        proc = psutil.Process(launcher.pid)
        assert ping(launcher.socket_path)["threads"] == 1
        settled(proc)  # the ping's own tail (closing its connection) is not idle time
        before, woke = proc.cpu_times(), proc.num_ctx_switches().voluntary
        time.sleep(3)
        after, wakeups = proc.cpu_times(), proc.num_ctx_switches().voluntary - woke
        used = (after.user + after.system) - (before.user + before.system)
        assert wakeups == 0, f"woke up {wakeups} times in 3 s idle"  # a 50 ms poll: 60
        assert used < 0.005, f"{used:.3f} s of CPU in 3 s idle"
        memory = proc.memory_full_info()
        print(f"idle launcher: RSS {memory.rss / 2**20:.0f} MiB, PSS {memory.pss / 2**20:.0f} MiB")
        assert memory.rss < 1 << 30
    finally:
        launcher.close()
