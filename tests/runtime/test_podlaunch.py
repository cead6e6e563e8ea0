"""A pod's launcher: torchrun whose workers fork from the process that imported torch.

Each run is one pod of one node and two processes in a network namespace of its own
(``unshare --net``, loopback up), where torchrun's stores bind as in a pod.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.runtime import podlaunch
from jupyter_disttrain.runtime.socketdir import MAX_SOCKET_PATH

IN_OWN_NETWORK = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
PARENT = re.compile(r"parent (\d) (\d+)")  # ranks write unbuffered: lines may interleave


def start_pod(cell: str, tmp_path: Path, marker: str) -> subprocess.Popen[str]:
    """``podlaunch`` on ``cell`` as a pod's first process, with the ``PET_*`` of 1 node x 2."""
    path = tmp_path / "payload.pkl"
    path.write_bytes(build_payload(cell, {}, job="pod").data)
    env = {
        **os.environ,
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": "2",
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "29500",
        "TEST_POD_MARKER": marker,
    }
    env.pop("DISTRAIN_LOG_DIR", None)
    command = [sys.executable, "-u", "-m", "jupyter_disttrain.runtime.podlaunch", str(path)]
    return subprocess.Popen(
        [*IN_OWN_NETWORK, *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def marked(marker: str) -> list[psutil.Process]:
    """Live processes started with ``TEST_POD_MARKER=marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and (
                proc.environ().get("TEST_POD_MARKER") == marker
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def finish(pod: subprocess.Popen[str], marker: str, timeout: float = 120) -> tuple[int, str]:
    try:
        output, _ = pod.communicate(timeout=timeout)
    finally:
        for proc in marked(marker):  # never leave a process behind, even on failure
            proc.kill()
    return pod.returncode, output


def test_the_workers_fork_from_the_pods_first_process_and_the_job_succeeds(
    tmp_path: Path,
) -> None:
    cell = "import os\nprint(f\"parent {os.environ['RANK']} {os.getppid()}\", flush=True)\n"
    marker = uuid.uuid4().hex
    pod = start_pod(cell, tmp_path, marker)
    code, output = finish(pod, marker)
    assert code == 0, output
    parents = dict(PARENT.findall(output))
    assert parents == {"0": str(pod.pid), "1": str(pod.pid)}, output
    assert not marked(marker)


def test_a_failing_rank_fails_the_pod_as_torchrun_would(tmp_path: Path) -> None:
    cell = "import os\nif os.environ['RANK'] == '1':\n    raise ValueError('rank one fails')\n"
    marker = uuid.uuid4().hex
    code, output = finish(start_pod(cell, tmp_path, marker), marker)
    assert code == 1, output
    assert "ValueError: rank one fails" in output and "ChildFailedError" in output, output
    assert not marked(marker)


def test_sigterm_to_the_first_process_alone_stops_every_rank(tmp_path: Path) -> None:
    """The kubelet signals a container's first process only: torchrun must hear it."""
    cell = (
        "import os, time\n"
        "print(f\"parent {os.environ['RANK']} {os.getppid()}\", flush=True)\n"
        "time.sleep(300)\n"
    )
    marker = uuid.uuid4().hex
    pod = start_pod(cell, tmp_path, marker)
    assert pod.stdout is not None
    seen = ""
    while len(PARENT.findall(seen)) < 2:
        line = pod.stdout.readline()
        assert line, seen
        seen += line
    started = time.monotonic()
    os.kill(pod.pid, signal.SIGTERM)
    code, output = finish(pod, marker, timeout=60)
    took = time.monotonic() - started
    assert code != 0 and took < 30, (code, took, seen + output)
    assert not marked(marker)


def test_the_socket_lives_in_a_private_folder_short_enough_even_under_a_deep_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    path = podlaunch.socket_path()
    assert path is not None
    folder = Path(path).parent
    try:
        assert len(os.fsencode(path)) < MAX_SOCKET_PATH
        assert not folder.is_relative_to(deep)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        folder.rmdir()
