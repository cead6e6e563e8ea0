"""A launcher that lingers after the kernel that started it, for this user's next kernels.

Real kernels and processes, each test in a runtime folder of its own: the next
kernel forks its job from the launcher an ended kernel started; a killed
kernel's job ends while the launcher stays; an idle launcher ends after its
linger; two processes starting at once share one; a killed launcher's socket
is replaced; ``linger`` 0 and a folder others can read give the process its
own launcher, and ``linger`` 0 set later lets go of the one held; a launcher
whose code changed since is replaced; ``disttrain launchers --stop`` ends them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_disttrain.backends.local import jobdir, lingering
from tests.backends.local.test_owner_kill import SLEEPER, job_tree, running
from tests.kernel_harness import Kernel
from tests.kernel_harness import kernel as start_kernel
from tests.test_kernel import wait_for_hello
from tests.test_sessions_kernel import assert_gone

pytestmark = pytest.mark.slow

CHOOSE = (
    "import json\n"
    "from jupyter_disttrain.backends.local.launcher import shared_launcher\n"
    "chosen = shared_launcher()\n"
    "print(json.dumps({'pid': chosen.pid, 'kind': type(chosen).__name__}))\n"
)


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A Jupyter runtime directory of the test's own, short enough for a socket's path
    (the test's temporary directory is not); its launchers are ended after it."""
    folder = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    try:
        yield folder
        assert_gone(lingering.stop_lingering(folder / "distrain"), 15.0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def env_for(runtime: Path, linger: float) -> dict[str, str]:
    """The environment of a process that lingers ``linger`` seconds in ``runtime``."""
    return {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), lingering.ENV_LINGER: str(linger)}


def choose(env: dict[str, str], script: str = CHOOSE) -> tuple[dict[str, object], str]:
    """In a new process running ``script``: the launcher it chooses (pid, class) and what it
    said on stderr."""
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_the_next_kernel_forks_from_the_launcher_an_ended_kernel_started(
    runtime: Path, tmp_path: Path
) -> None:
    """Kernel A starts the launcher and is killed: its job ends, the launcher stays.
    Kernel B, started after, forks its job's workers from that launcher."""
    env = env_for(runtime, 60)
    home = str(tmp_path / "home")
    with start_kernel(home, env) as first:
        first.execute("%load_ext jupyter_disttrain\n%distrain_config live=none")
        first.execute(f"%%distrain --nodes 1 --nproc 2 --name linger-a\n{SLEEPER}")
        os.environ["DISTRAIN_HOME"], saved = home, os.environ["DISTRAIN_HOME"]
        try:
            ranks = wait_for_hello("linger-a", 2)
            directory = jobdir.job_dir("linger-a")
            tree = job_tree(directory)
        finally:
            os.environ["DISTRAIN_HOME"] = saved
        [launcher] = lingering.lingering(runtime / "distrain")
        assert all(psutil.Process(r).ppid() == launcher["pid"] for r in ranks), (
            parents_of(ranks),
            launcher,
            said_in_logs(directory),
            kernel_said(first),
            launcher_logs(runtime / "distrain"),
        )
        assert first.km.provisioner is not None and first.km.provisioner.pid is not None
        os.kill(first.km.provisioner.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while running(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(tree), f"the killed kernel's job still runs: {running(tree)}"
    survivor = psutil.Process(int(launcher["pid"]))
    assert survivor.status() != psutil.STATUS_ZOMBIE, "the launcher ended with its first kernel"
    with start_kernel(home, env) as second:
        second.execute("%load_ext jupyter_disttrain\n%distrain_config live=none")
        marks = tmp_path / "parents"
        marks.mkdir()
        second.execute(
            "%%distrain --nodes 1 --nproc 2 --wait --name linger-b\n"
            f"import os\nopen({str(marks)!r} + '/' + os.environ['RANK'], 'w')"
            ".write(str(os.getppid()))\n",
            timeout=180,
        )
    parents = {path.read_text() for path in marks.iterdir()}
    assert parents == {str(launcher["pid"])}, parents
    assert [f["pid"] for f in lingering.lingering(runtime / "distrain")] == [launcher["pid"]]


def test_a_launcher_started_here_has_this_processs_identity_whatever_the_c_environ_holds(
    runtime: Path,
) -> None:
    """A library may set a variable with C's setenv, which os.environ does not show: the
    launcher gets os.environ, the environment this process's identity was read from."""
    script = "import ctypes\nctypes.CDLL(None).setenv(b'TORCH_SET_IN_C', b'1', 1)\n" + CHOOSE
    chosen, said = choose(env_for(runtime, 5), script)
    assert chosen["kind"] == "SharedLauncher", said


def test_an_idle_launcher_ends_after_its_linger(runtime: Path) -> None:
    chosen, _ = choose(env_for(runtime, 1))
    assert chosen["kind"] == "SharedLauncher", chosen
    assert_gone([int(str(chosen["pid"]))], 30.0)
    assert not list((runtime / "distrain").glob("*.sock"))


def test_two_processes_starting_at_once_share_one(runtime: Path) -> None:
    env = env_for(runtime, 60)
    started = [
        subprocess.Popen([sys.executable, "-c", CHOOSE], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    chosen = [json.loads(p.communicate(timeout=180)[0].splitlines()[-1]) for p in started]
    assert len({c["pid"] for c in chosen}) == 1, chosen
    assert {c["kind"] for c in chosen} == {"SharedLauncher"}


def test_a_killed_launchers_socket_is_replaced(runtime: Path) -> None:
    env = env_for(runtime, 60)
    first, _ = choose(env)
    os.kill(int(str(first["pid"])), signal.SIGKILL)
    assert_gone([int(str(first["pid"]))], 10.0)
    second, said = choose(env)
    assert second["kind"] == "SharedLauncher" and second["pid"] != first["pid"], (second, said)


#: A launcher that is slow between ``bind`` and ``listen`` (as one preempted there on a
#: loaded machine): binds the path, waits, then listens and accepts one connection.
SLOW_TO_LISTEN = (
    "import os, socket, sys, time\n"
    "os.umask(0o177)\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "s.bind(sys.argv[1])\n"
    "time.sleep(1.0)\n"
    "s.listen(1)\n"
    "s.accept()[0].sendall(b'hello')\n"
)


def test_a_launcher_that_has_bound_but_not_yet_listens_keeps_its_socket(runtime: Path) -> None:
    """A refused connection to the new launcher's path is a launcher between ``bind`` and
    ``listen``, not a stale socket: the path stays and the connection is made once it listens."""
    path = str(runtime / "launcher.sock")
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TO_LISTEN, path])
    try:
        started = time.monotonic()
        with lingering._await_socket(path, proc) as conn:
            waited = time.monotonic() - started
            assert conn.recv(5) == b"hello", waited
        assert waited < lingering.START_TIMEOUT, waited
    finally:
        proc.kill()
        proc.wait()


def test_linger_zero_gives_the_process_its_own(runtime: Path) -> None:
    chosen, _ = choose(env_for(runtime, 0))
    assert chosen["kind"] == "Launcher", chosen
    assert not (runtime / "distrain").exists()


LET_GO = (
    "import json, time\n"
    "from jupyter_disttrain.backends.local.launcher import shared_launcher\n"
    "held = shared_launcher()\n"
    "own = shared_launcher(0)\n"
    "deadline = time.monotonic() + 30\n"
    "while held.alive() and time.monotonic() < deadline:\n"
    "    time.sleep(0.1)\n"
    "print(json.dumps({'held': type(held).__name__, 'then': type(own).__name__,\n"
    "                  'gone': not held.alive()}))\n"
)


def test_linger_zero_lets_go_of_the_held_launcher(runtime: Path) -> None:
    """``%distrain_config linger=0`` after the kernel chose the lingering launcher: the
    next job's launcher is the kernel's own, and the lingering one, no longer held, ends
    after its linger while the kernel still runs."""
    done = subprocess.run(
        [sys.executable, "-c", LET_GO], env=env_for(runtime, 1), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said == {"held": "SharedLauncher", "then": "Launcher", "gone": True}, done


def test_a_folder_others_can_read_is_refused(runtime: Path) -> None:
    (runtime / "distrain").mkdir(parents=True, mode=0o755)
    os.chmod(runtime / "distrain", 0o755)
    chosen, said = choose(env_for(runtime, 60))
    assert chosen["kind"] == "Launcher", chosen
    assert "is not a directory of this user with mode 0700" in said, said
    assert not list((runtime / "distrain").iterdir())


def test_disttrain_launchers_lists_and_stops_them(runtime: Path) -> None:
    env = env_for(runtime, 60)
    chosen, _ = choose(env)
    command = [sys.executable, "-m", "jupyter_disttrain.cli", "launchers"]
    listed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert listed.stdout.startswith(f"{chosen['pid']}  lingers 60.0 s idle"), listed
    stopped = subprocess.run([*command, "--stop"], env=env, capture_output=True, text=True)
    assert stopped.stdout.strip() == f"stopped the lingering launcher {chosen['pid']}", stopped
    assert_gone([int(str(chosen["pid"]))], 15.0)


def test_a_runtime_folder_too_long_for_a_socket_gives_the_process_its_own(tmp_path: Path) -> None:
    folder = tmp_path / ("long-" * 12)
    chosen, said = choose(env_for(folder, 60))
    assert chosen["kind"] == "Launcher", chosen
    assert "too long a path for a Unix socket; set JUPYTER_RUNTIME_DIR" in said, said


def test_a_launcher_whose_code_changed_since_is_replaced(runtime: Path, tmp_path: Path) -> None:
    """A file it imported changed (an upgrade, an edit): the next process starts a new
    launcher and says why, and the outdated one ends once no one holds it."""
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "sitecustomize.py").write_text("")  # imported by every process started with it
    env = {**env_for(runtime, 60), "PYTHONPATH": str(extra)}
    first, _ = choose(env)
    os.utime(extra / "sitecustomize.py")  # now: after the launcher started, before the next
    second, said = choose(env)
    assert second["kind"] == "SharedLauncher" and second["pid"] != first["pid"], (second, said)
    assert f"{extra}/sitecustomize.py changed after the lingering launcher imported it" in said
    assert_gone([int(str(first["pid"]))], 15.0)
    third, said = choose(env)
    assert third["pid"] == second["pid"] and not said, (third, said)


def said_in_logs(directory: Path) -> list[str]:
    """What the job's processes said of themselves: the ``distrain:`` lines of its logs (a
    worker the launcher could not fork says why)."""
    return [
        f"{path.name}: {line}"
        for path in sorted(jobdir.logs_dir(directory).glob("*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if "distrain:" in line
    ]


def kernel_said(kernel: Kernel) -> str:
    """What a kernel printed so far (a launcher it could not use says why on stderr)."""
    kernel.drain(0.5)
    return "".join(m["content"]["text"] for m in kernel.iopub if m["msg_type"] == "stream")


def launcher_logs(folder: Path) -> dict[str, str]:
    """The lingering launchers' own logs in ``folder`` (their last 2,000 characters)."""
    return {path.name: path.read_text(errors="replace")[-2000:] for path in folder.glob("*.log")}


def parents_of(pids: list[int]) -> dict[int, str]:
    """Each process's parent, its pid and command line (for a failing assertion)."""
    out = {}
    for pid in pids:
        try:
            parent = psutil.Process(pid).parent()
            out[pid] = "none" if parent is None else f"{parent.pid}: {' '.join(parent.cmdline())}"
        except psutil.Error as exc:
            out[pid] = repr(exc)
    return out
