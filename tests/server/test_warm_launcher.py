"""The Jupyter server's warm launcher, with a real server and real kernels.

Two kernels of one server share its launcher; a kernel of another Python
environment, or with a changed import-time variable, starts its own; a job
forked for a kernel sees that kernel's working directory, environment and
``sys.path``; the socket is private and refuses another user; a kernel's
SIGKILL ends its jobs in the shared launcher; killing the server leaves no
launcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
from jupyter_client.blocking import BlockingKernelClient

from jupyter_disttrain.backends.local import jobdir
from jupyter_disttrain.backends.local.lingering import ENV_LINGER
from tests.backends.local.test_owner_kill import job_tree, running
from tests.kernel_harness import Kernel
from tests.test_kernel import wait_for_hello

pytestmark = pytest.mark.slow
#: A Python another user may run (the test's own may sit in root's home).
SYSTEM_PYTHON = "/usr/bin/python3"

LAUNCHER_PID = (
    "from jupyter_disttrain.backends.local.launcher import shared_launcher\n"
    "print(shared_launcher().pid, type(shared_launcher()).__name__)"
)


@dataclass
class Server:
    """A ``jupyter server`` subprocess and the kernels started in it."""

    url: str
    root: Path
    runtime: Path
    home: Path
    process: subprocess.Popen[bytes]
    kernels: list[Kernel] = field(default_factory=list)
    kernel_pids: list[int] = field(default_factory=list)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
        return answer

    def kernel(self, name: str = "python3", path: str = "") -> Kernel:
        """A kernel of this server (``path``: its folder under the root), ready to run cells."""
        kid = self.post("/api/kernels", {"name": name, "path": path})["id"]
        kc = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kid}.json"))
        kc.load_connection_file()
        kc.start_channels(hb=False)  # a heartbeat late under load reads as a dead kernel
        kc.wait_for_ready(timeout=120)
        kernel = Kernel(cast(Any, None), kc)
        self.kernels.append(kernel)
        pid = kernel.run("import os; print(os.getpid())").strip()
        self.kernel_pids.append(int(pid))
        return kernel

    def launchers(self) -> list[psutil.Process]:
        """The server's launcher processes (its children running the zygote)."""
        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.Error:
            return []
        found = []
        for child in children:
            with contextlib.suppress(psutil.Error):  # a killed kernel not reaped yet
                if "jupyter_disttrain.runtime.zygote" in " ".join(child.cmdline()):
                    found.append(child)
        return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _other_python(tmp: Path) -> str:
    """A second Python environment (its own ``sys.prefix``) that sees this one's packages."""
    venv = tmp / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_paths()["purelib"]
    found = list(venv.glob("lib/python*/site-packages"))
    (found[0] / "shared.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    return str(venv / "bin" / "python")


def _kernelspec(folder: Path, name: str, argv0: str, env: dict[str, str]) -> None:
    spec = folder / "kernels" / name
    spec.mkdir(parents=True)
    argv = [argv0, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": name, "language": "python", "env": env})
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("warm")
    root, runtime, home, specs = (tmp / d for d in ("root", "runtime", "home", "specs"))
    for folder in (root / "a", root / "b", runtime, specs):
        folder.mkdir(parents=True)
    _kernelspec(specs, "otherpy", _other_python(tmp), {})
    _kernelspec(specs, "otherenv", sys.executable, {"PYTHONPATH": str(tmp / "extra")})
    env = {
        **os.environ,
        "DISTRAIN_HOME": str(home),
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTER_PATH": str(specs),
        "KUBECONFIG": str(tmp / "no-kubeconfig"),
        # a kernel the server's launcher cannot serve starts one of its own, not a lingering one
        ENV_LINGER: "0",
    }
    env.pop("DISTRAIN_WARM_LAUNCHER", None)
    port = _free_port()
    log = open(tmp / "server.log", "wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--no-browser",
            "--allow-root",
            "--ServerApp.disable_check_xsrf=True",
            f"--ServerApp.root_dir={root}",
            '--ServerApp.jpserver_extensions={"jupyter_disttrain.server": True}',
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    srv = Server(f"http://127.0.0.1:{port}", root, runtime, home, process)
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(srv.url + "/api/status", timeout=2).close()
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, (
                tmp / "server.log"
            ).read_text()
            time.sleep(0.2)
    try:
        yield srv
    finally:
        for kernel in srv.kernels:
            kernel.kc.stop_channels()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
        process.kill()
        process.wait()
        for pid in srv.kernel_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        log.close()


def _pid_and_kind(kernel: Kernel) -> tuple[int, str]:
    pid, kind = kernel.run(LAUNCHER_PID, timeout=180).split()
    return int(pid), kind


@pytest.fixture(scope="module")
def pair(server: Server) -> tuple[Kernel, Kernel]:
    """Kernels A and B of the server, in folders a and b, each with its own marks."""
    kernels = []
    for mark in ("a", "b"):
        k = server.kernel(path=mark)
        k.execute("%load_ext jupyter_disttrain")
        k.execute("%distrain_config live=none")
        k.execute(
            f"import os, sys; os.environ['WARM_MARK'] = {mark!r}; "
            f"sys.path.insert(0, '/nonexistent/mark-{mark}')"
        )
        kernels.append(k)
    return kernels[0], kernels[1]


def test_two_kernels_share_the_servers_launcher(
    server: Server, pair: tuple[Kernel, Kernel]
) -> None:
    launchers = server.launchers()
    assert len(launchers) == 1, launchers
    a, b = (_pid_and_kind(k) for k in pair)
    assert a == b == (launchers[0].pid, "SharedLauncher")


@pytest.mark.parametrize("spec", ["otherpy", "otherenv"])
def test_another_environment_gets_its_own(server: Server, spec: str) -> None:
    shared = server.launchers()[0].pid
    kernel = server.kernel(spec)
    kernel.execute("%load_ext jupyter_disttrain")
    pid, kind = _pid_and_kind(kernel)
    assert kind == "Launcher" and pid != shared
    assert psutil.Process(pid).ppid() == server.kernel_pids[-1]  # the kernel's own
    kernel.kc.shutdown()


SHADOW = """
import contextlib, importlib, io, shutil, sys, tempfile, cloudpickle
from pathlib import Path
folder = tempfile.mkdtemp()
shutil.copytree(Path(cloudpickle.__file__).parent, Path(folder) / "cloudpickle")
sys.path.insert(0, folder)
importlib.invalidate_caches()
from jupyter_disttrain.backends.local.launcher import shared_launcher
said = io.StringIO()
with contextlib.redirect_stderr(said):
    shadowed = shared_launcher()
sys.path.remove(folder)
again = shared_launcher()
print(shadowed.pid, type(shadowed).__name__, again.pid, type(again).__name__)
print(said.getvalue())
"""


def test_a_kernel_whose_sys_path_imports_other_files_gets_its_own_for_that_time(
    server: Server,
) -> None:
    """A module the server's launcher imported, found elsewhere first on this kernel's
    ``sys.path`` now: the job forks from a launcher of the kernel's own, and says why."""
    shared = server.launchers()[0].pid
    kernel = server.kernel(path="a")
    kernel.execute("%load_ext jupyter_disttrain")
    first, note = kernel.run(SHADOW, timeout=180).split("\n", 1)
    own_pid, own_kind, back_pid, back_kind = first.split()
    assert own_kind == "Launcher" and int(own_pid) != shared, first
    assert psutil.Process(int(own_pid)).ppid() == server.kernel_pids[-1]  # the kernel's own
    assert (int(back_pid), back_kind) == (shared, "SharedLauncher"), first
    assert "imports cloudpickle from /tmp/" in note and "launcher of this kernel's own" in note
    kernel.kc.shutdown()


CELL = (
    "import os, sys\n"
    "(os.getcwd(), os.environ.get('WARM_MARK'), [p for p in sys.path if 'mark-' in p],"
    " os.getppid())"
)


def test_a_job_sees_its_own_kernels_cwd_env_and_sys_path(
    server: Server, pair: tuple[Kernel, Kernel]
) -> None:
    shared = server.launchers()[0].pid
    for kernel, mark in zip(pair, "ab", strict=True):
        out = kernel.run(
            f"%%distrain --nodes 1 --nproc 1 --wait --name warm-{mark} -o job\n{CELL}\n", 180
        )
        assert "Succeeded" in kernel.run("print(job.status())"), out
        cwd, env_mark, paths, parent = json.loads(
            kernel.run("import json; print(json.dumps(job.result()))")
        )
        assert (cwd, env_mark, paths) == (
            str(server.root / mark),
            mark,
            [f"/nonexistent/mark-{mark}"],
        )
        assert parent == shared  # forked from the server's launcher


def test_the_socket_is_private_and_refuses_another_user(server: Server) -> None:
    path = server.launchers()[0].cmdline()[-1]
    folder = os.path.dirname(path)
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    assert os.lstat(path).st_uid == os.lstat(folder).st_uid == os.getuid()
    if os.getuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK):
        return  # another user's process needs root to make, and a Python it may run
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(sys.argv[1])\n"
        's.sendall(b\'{"op": "ping"}\\n\'); print(repr(s.recv(4096)))'
    )
    os.chmod(folder, 0o711)  # let another user reach the socket: its peer check must refuse
    os.chmod(path, 0o666)
    try:
        other = subprocess.run(
            [SYSTEM_PYTHON, "-c", probe, path],
            user=65534,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.chmod(path, 0o600)
        os.chmod(folder, 0o700)
    assert other.stdout.strip() in ("b''", ""), other
    mine = subprocess.run(
        [sys.executable, "-c", probe, path], capture_output=True, text=True, timeout=60
    )
    assert '"identity"' in mine.stdout, mine


def test_a_killed_kernel_ends_its_jobs_in_the_shared_launcher(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = server.kernel(path="a")
    kernel.execute("%load_ext jupyter_disttrain")
    kernel.execute("%distrain_config live=none")
    kernel.execute("%%distrain --nodes 2 --nproc 1 --name warm-kill\nimport time\ntime.sleep(300)")
    monkeypatch.setenv("DISTRAIN_HOME", str(server.home))
    wait_for_hello("warm-kill", 2)
    tree = job_tree(jobdir.job_dir("warm-kill"))
    assert len(tree) >= 4, tree
    launcher = server.launchers()[0]
    os.kill(server.kernel_pids[-1], signal.SIGKILL)
    deadline = time.monotonic() + 15
    while running(tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running(tree), running(tree)
    assert launcher.is_running()  # the other kernels' launcher stays


def test_killing_the_server_leaves_no_launcher(server: Server) -> None:
    launchers = server.launchers()
    assert launchers
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    _, alive = psutil.wait_procs(launchers, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def test_the_servers_prewarm_option_governs_its_launcher() -> None:
    from traitlets.config import Config

    from jupyter_disttrain.server import warm

    off = Config()
    off.DistrainMagics.prewarm = False
    assert not warm.wanted(off)
    assert warm.wanted(Config())
