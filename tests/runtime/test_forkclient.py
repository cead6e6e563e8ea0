"""The worker command of fork mode (runtime/forkclient.py): a worker the launcher cannot
fork starts as a fresh interpreter, and its log says why."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import forkclient


def run_client(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"ok": 1}))
    # the fallback module is json.tool: it prints the payload file it is given
    merged = {**os.environ, forkclient.ENV_FALLBACK: "json.tool"}
    merged.pop(forkclient.ENV_LAUNCHER, None)
    merged.update(env)
    no_python, *command = forkclient.torchrun_command()  # as torchrun runs it: without site
    assert no_python == "--no-python"
    return subprocess.run(
        [*command, str(payload)],
        env=merged,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_launcher_to_reach_says_why_and_runs_the_worker_itself(tmp_path: Path) -> None:
    done = run_client(tmp_path, **{forkclient.ENV_LAUNCHER: str(tmp_path / "gone.sock")})
    assert done.returncode == 0 and json.loads(done.stdout) == {"ok": 1}, done
    assert "distrain: the warm launcher could not fork this worker (FileNotFoundError" in (
        done.stderr
    ), done.stderr


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b'{"error": "RuntimeError: launcher has 2 threads"}\n', "RuntimeError: launcher has 2"),
        (b"", "it did not answer"),
    ],
)
def test_a_launcher_that_refuses_is_named_with_its_reason(
    tmp_path: Path, answer: bytes, said: str
) -> None:
    """A socket of this user that answers without a pid (as the launcher does when it may not
    fork): the worker starts fresh and its log carries the launcher's words."""
    path = str(tmp_path / "launcher.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def answer_once() -> None:
        conn, _ = server.accept()
        conn.makefile("rb").readline()
        conn.sendall(answer)
        conn.close()

    thread = threading.Thread(target=answer_once, daemon=True)
    thread.start()
    try:
        done = run_client(tmp_path, **{forkclient.ENV_LAUNCHER: path})
    finally:
        thread.join(timeout=10)
        server.close()
    assert done.returncode == 0 and json.loads(done.stdout) == {"ok": 1}, done
    assert f"could not fork this worker ({said}" in done.stderr, done.stderr


def test_without_a_launcher_named_nothing_is_said(tmp_path: Path) -> None:
    done = run_client(tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout) == {"ok": 1}, done
    assert "distrain:" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("line", "code"),
    [(b'{"exit": 0}', 0), (b'{"exit": 3}', 3), (b'{"signal": 9}', -9), (b"{", 1), (b"[]", 1)],
)
def test_the_launchers_word_on_a_worker_is_a_popen_return_code(line: bytes, code: int) -> None:
    assert forkclient.returncode(line) == code
