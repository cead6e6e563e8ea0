"""A launcher hands the requests of a job that asks for a library ahead to a warm child of
its own: the launcher never imports it (a later job does not find it imported), the
child serves every job that asks for the same, and a child whose files changed since
it imported them forks no more and is replaced by a new one.

Real launcher (``zygote``) and torchrun agents; a made-up ``lightning`` package on the
launcher's ``PYTHONPATH``; each agent's one process prints which process forked it.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local.launcher import Launcher, ping
from jupyter_disttrain.runtime.warm import ENV_WARM
from jupyter_disttrain.runtime.warmchild import ENV_RUN_ID, HEADER, recv_message, send_message

#: The agent's one process says who forked the agent (its parent's parent).
SAYS_WHO_FORKED = "echo forked-by=$(awk '/^PPid/{print $2}' /proc/$PPID/status)"


def test_messages_and_the_connections_they_carry_arrive_each_with_its_own() -> None:
    launcher_end, child_end = socket.socketpair()
    first, first_peer = socket.socketpair()
    second, second_peer = socket.socketpair()
    with launcher_end, child_end, first, first_peer, second, second_peer:

        def send_three() -> None:  # more than the socket holds: read while it is sent
            send_message(launcher_end, {"op": "handoff", "request": {"n": 1}}, first.fileno())
            send_message(launcher_end, {"op": "handoff", "request": {"big": "x" * (1 << 20)}})
            send_message(launcher_end, {"op": "handoff", "request": {"n": 2}}, second.fileno())

        sender = threading.Thread(target=send_three)
        sender.start()
        got = [recv_message(child_end) for _ in range(3)]
        sender.join()
        assert [g is not None and g[0]["request"].get("n") for g in got] == [1, None, 2]
        assert got[1] is not None and got[1][1] is None
        for message, (_, conn) in ((b"one", got[0]), (b"two", got[2])):  # type: ignore[misc]
            assert conn is not None
            conn.sendall(message)
            conn.close()
        assert (first_peer.recv(8), second_peer.recv(8)) == (b"one", b"two")
        launcher_end.close()
        assert recv_message(child_end) is None


def test_a_message_cut_off_reads_as_the_other_sides_end() -> None:
    launcher_end, child_end = socket.socketpair()
    passed, peer = socket.socketpair()
    with launcher_end, child_end, passed, peer:
        socket.send_fds(launcher_end, [HEADER.pack(100)], [passed.fileno()])
        launcher_end.sendall(b'{"op": "ha')
        launcher_end.close()
        assert recv_message(child_end) is None


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Launcher]:
    """A launcher whose ``sys.path`` finds a made-up ``lightning`` (which imports another
    package in turn)."""
    site = tmp_path / "site"
    (site / "lightning" / "pytorch").mkdir(parents=True)
    (site / "lightning" / "__init__.py").write_text("")
    (site / "lightning" / "pytorch" / "__init__.py").write_text("import lightning_extra\n")
    (site / "lightning_extra.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    started = Launcher(log_path=tmp_path / "launcher.log")
    try:
        started.wait_ready()
        yield started
    finally:
        started.close()


def forked_by(
    launcher: Launcher, folder: Path, name: str, warm: bool, run: str = ""
) -> tuple[int, bool]:
    """Run an agent (asking for ``lightning.pytorch`` ahead when ``warm``; of the job
    submitted as ``run`` when given): the process that started it, and whether it was
    forked."""
    log = folder / f"{name}.log"
    env = {**os.environ, ENV_WARM: "lightning.pytorch"} if warm else dict(os.environ)
    if run:
        env[ENV_RUN_ID] = run
    argv = ["--standalone", "--nproc-per-node=1", "--no-python", "sh", "-c", SAYS_WHO_FORKED]
    handle = launcher.request(
        {"op": "agent", "argv": argv, "env": env, "cwd": str(folder), "pgid": 0, "log": str(log)}
    )
    deadline = time.monotonic() + 120
    while handle.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    said = log.read_text()
    assert handle.poll() == 0, said
    found = re.search(r"forked-by=(\d+)", said)
    assert found, said
    return int(found.group(1)), handle.forked


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    return not os.path.exists(f"/proc/{pid}")


@pytest.mark.slow
def test_a_warm_child_serves_the_jobs_that_ask_and_the_launcher_stays_without(
    launcher: Launcher, tmp_path: Path
) -> None:
    log = tmp_path / "launcher.log"
    child, forked = forked_by(launcher, tmp_path, "warm-1", warm=True)
    assert forked and child != launcher.pid, log.read_text()
    assert forked_by(launcher, tmp_path, "plain", warm=False) == (launcher.pid, True)
    modules = ping(launcher.socket_path)["modules"]
    assert "lightning" not in modules and "lightning_extra" not in modules, modules
    assert forked_by(launcher, tmp_path, "warm-2", warm=True, run="job-2") == (child, True)
    assert log.read_text().count("imported lightning.pytorch ahead") == 1, log.read_text()

    # a file the child imported changes: the files are read once a job (at its first
    # agent), so the next job starts afresh, and the child retires
    changed = tmp_path / "site" / "lightning_extra.py"
    later = time.time() + 5
    os.utime(changed, (later, later))
    assert forked_by(launcher, tmp_path, "warm-2b", warm=True, run="job-2") == (child, True)
    assert forked_by(launcher, tmp_path, "warm-3", warm=True, run="job-3") == (child, False)
    assert f"{changed} changed since" in log.read_text(), log.read_text()
    assert gone(child, 10.0), log.read_text()
    renewed, forked = forked_by(launcher, tmp_path, "warm-4", warm=True)
    assert forked and renewed not in (child, launcher.pid), log.read_text()
    assert log.read_text().count("imported lightning.pytorch ahead") == 2, log.read_text()


@pytest.mark.slow
def test_the_warm_children_end_with_the_launcher(launcher: Launcher, tmp_path: Path) -> None:
    child, _ = forked_by(launcher, tmp_path, "warm", warm=True)
    launcher.close()
    assert gone(child, 1.0), (tmp_path / "launcher.log").read_text()
