"""A JupyterLab or Notebook 7 server on 127.0.0.1 for the browser tests, in its own dirs.

The tests that need nothing of a server but a page share one per app for the whole run
(:func:`lab`, :func:`notebook7`): each test ends its kernels, and the server forgets its
open tabs, before the next; what a test's kernels started must have ended by then. A test
that needs a server of its own -- other settings, an empty job home, a cluster -- starts
one with :func:`serve_lab` or :func:`_serve`.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUTPUT = REPO / "test-output" / "browser"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
LAB_SETTINGS = {
    # every cell stays in the DOM (no virtual scrolling), no news or update checks, and the
    # editor's caret does not blink: a page whose cell has focus repaints at each blink, which
    # was about 5 % of three browser tests' CPU (68.0 CPU s with it, 64.4 without)
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
    "@jupyterlab/codemirror-extension/plugin.jupyterlab-settings": {
        "defaultConfig": {"cursorBlinkRate": 0},
    },
}


@dataclass
class Lab:
    url: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path
    #: Where the server saves workspaces (the tabs a page reopens): emptied after each test.
    workspaces: Path

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until the server at ``url`` answers ``/api/status``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"the server is not answering at {url} after {timeout} s")


def _stop(lab: Lab, procs: list[psutil.Process]) -> list[str]:
    """Stop the server (it shuts its kernels down), then anything of it left; what was left."""
    if lab.process.poll() is None:
        lab.process.send_signal(signal.SIGTERM)
        try:
            lab.process.wait(30)
        except subprocess.TimeoutExpired:
            lab.process.kill()
            lab.process.wait(10)
    return _ended(procs, 15)


def _ended(procs: list[psutil.Process], timeout: float) -> list[str]:
    """Wait up to ``timeout`` s for ``procs`` to end, then kill those left; what was left."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    left = []
    for proc in alive:
        try:
            left.append(f"{proc.pid}: {' '.join(proc.cmdline())[:120]}")
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=5)
    return left


@pytest.fixture(scope="session")
def browser_ready() -> None:
    """Chromium and the Node harness must be installed (``make browser-deps`` does it)."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        missing.append("tests/browser/node_modules (npm ci in tests/browser)")
    if missing:
        pytest.fail(
            "browser test prerequisites missing: " + "; ".join(missing) + "; run make browser-deps"
        )


def _serve(tmp_path: Path, app: str, options: list[str]) -> Iterator[Lab]:
    """``python -m APP`` (jupyterlab or notebook) on 127.0.0.1, token-less, in ``tmp_path``."""
    root = tmp_path / "notebooks"
    root.mkdir()
    settings = tmp_path / "lab-settings"
    workspaces = tmp_path / "workspaces"
    for name, values in LAB_SETTINGS.items():
        target = settings / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    env = dict(os.environ)
    env.update(
        DISTRAIN_HOME=str(tmp_path / "distrain-home"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(workspaces),
    )
    port = _free_port()
    log = tmp_path / f"{app}.log"
    cmd = [
        sys.executable,
        "-m",
        app,
        "--allow-root",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={root}",
        *options,
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    lab = Lab(f"http://127.0.0.1:{port}", root, process, log, workspaces)
    procs: list[psutil.Process] = []
    try:
        _wait_ready(lab.url, process, 90)
        yield lab
        procs = lab.descendants()
    finally:
        procs = procs or lab.descendants()
        left = _stop(lab, procs)
    assert not left, f"processes left behind by the browser test: {left}"


def end_sessions(lab: Lab) -> None:
    """Shut every kernel of the server down, its notebooks' sessions first (``DELETE
    /api/sessions/ID``, then ``/api/kernels/ID``, with the ``_xsrf`` cookie a page of the
    server sets, as a browser would)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{lab.url}/lab", timeout=30):
        pass
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    for kind in ("sessions", "kernels"):
        with opener.open(f"{lab.url}/api/{kind}", timeout=30) as reply:
            items = json.load(reply)
        for item in items:
            url = f"{lab.url}/api/{kind}/{item['id']}"
            request = urllib.request.Request(url, method="DELETE", headers={"X-XSRFToken": xsrf})
            with opener.open(request, timeout=60):
                pass


def _launchers_own(proc: psutil.Process, before: set[int]) -> bool:
    """Whether ``proc`` is a fork the server's launcher keeps for later jobs (a warm child,
    ``runtime/warmchild.py``): a child of a process there before the test, with its
    command line and in its process group (a job's processes get groups of their own)."""
    try:
        parent = proc.parent()
        return (
            parent is not None
            and parent.pid in before
            and os.getpgid(proc.pid) == os.getpgid(parent.pid)
            and proc.cmdline() == parent.cmdline()
        )
    except (psutil.Error, OSError):
        return False


def _one_test(server: Lab) -> Iterator[Lab]:
    """``server`` for one test; then its kernels ended, its saved workspaces (the tabs a
    page would reopen) removed, and every process started during the test ended but the
    forks the server's launcher keeps (:func:`_launchers_own`)."""
    before = {proc.pid for proc in server.descendants()}
    try:
        yield server
    finally:
        started = [
            proc
            for proc in server.descendants()
            if proc.pid not in before and not _launchers_own(proc, before)
        ]
        end_sessions(server)
        for saved in server.workspaces.glob("*"):
            saved.unlink()
        left = _ended(started, 30)
    assert not left, f"processes left behind by the browser test: {left}"


def serve_lab(tmp_path: Path) -> Iterator[Lab]:
    """``jupyter lab`` on 127.0.0.1, token-less, rooted in a temporary directory (with the
    environment of now: a fixture may set some first)."""
    yield from _serve(
        tmp_path, "jupyterlab", ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    )


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory: pytest.TempPathFactory, browser_ready: None) -> Iterator[Lab]:
    """``jupyter lab`` on 127.0.0.1, token-less, rooted in a temporary directory, for the
    whole run."""
    yield from serve_lab(tmp_path_factory.mktemp("shared-lab"))


@pytest.fixture(scope="session")
def shared_notebook7(
    tmp_path_factory: pytest.TempPathFactory, browser_ready: None
) -> Iterator[Lab]:
    """``jupyter notebook`` (Notebook 7) on 127.0.0.1, token-less, in a temporary directory,
    for the whole run."""
    yield from _serve(tmp_path_factory.mktemp("shared-notebook7"), "notebook", [])


@pytest.fixture
def lab(shared_lab: Lab) -> Iterator[Lab]:
    """The run's JupyterLab server, for one test (:func:`_one_test`)."""
    yield from _one_test(shared_lab)


@pytest.fixture
def notebook7(shared_notebook7: Lab) -> Iterator[Lab]:
    """The run's Notebook 7 server, for one test (:func:`_one_test`)."""
    yield from _one_test(shared_notebook7)
