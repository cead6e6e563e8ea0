"""The brand-new-kernel rows of ``bench/launch.py``, and the breakdown of a warm start.

A brand-new kernel runs its first training cell: Accelerate (``import torch,
accelerate``; ``notebook_launcher(train, 4)``) or ``%load_ext
jupyter_disttrain`` and the 2x2 ``%%distrain`` cell, the latter in a kernel of
a running Jupyter server (whose warm launcher the kernel shares), in a kernel
started without a server on a machine where no launcher runs (it starts one),
and in a kernel started without a server after an earlier kernel ended (whose
launcher lingers). Each kernel without a server has a Jupyter runtime folder
of its own row, and the launchers they leave are ended after each run of (g)
and after the rows. Timed from the kernel's ``kernel_info``
reply to the cell's ``execute_reply``. Every cell has a time limit; a hung
one raises :class:`TimeoutError` and its kernel is killed.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.manager import start_new_kernel

from jupyter_disttrain.backends.local import lingering

ENV_WARM = "DISTRAIN_WARM_LAUNCHER"

ACCELERATE_CELL = """
import os, torch, accelerate
from accelerate import notebook_launcher
def train():
    exec(compile(open(os.environ["BENCH_TRAIN"]).read(), "train", "exec"), {})
notebook_launcher(train, num_processes=4, use_port=os.environ["BENCH_PORT"])
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def execute(kc: BlockingKernelClient, code: str, limit: float) -> float:
    """Run ``code``; seconds until its reply. TimeoutError past ``limit``, RuntimeError on error."""
    return execute_probed(kc, code, limit)[0]


#: Read in the kernel right after a cell (``user_expressions``): its CPU seconds so far and
#: whether torch is imported in it.
PROBE = {
    "cpu": "__import__('time').process_time()",
    "torch": "'torch' in __import__('sys').modules",
}


def execute_probed(kc: BlockingKernelClient, code: str, limit: float) -> tuple[float, float, bool]:
    """:func:`execute`, also reading :data:`PROBE`: (seconds, kernel CPU s so far, torch?)."""
    started = time.perf_counter()
    msg_id = kc.execute(code, user_expressions=PROBE)
    deadline = time.monotonic() + limit
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no reply within {limit:.0f} s to {code.strip()[:40]!r}")
        try:
            reply = kc.get_shell_msg(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if reply["parent_header"].get("msg_id") != msg_id:
            continue
        if reply["content"]["status"] != "ok":
            raise RuntimeError("".join(reply["content"].get("traceback", [])))
        seconds = time.perf_counter() - started
        found = reply["content"].get("user_expressions", {})
        return seconds, float(_probe(found, "cpu")), _probe(found, "torch") == "True"


def _probe(found: dict[str, Any], name: str) -> Any:
    value = found.get(name, {})
    if value.get("status") != "ok":
        raise RuntimeError(f"the kernel could not read {PROBE[name]}: {value}")
    return value["data"]["text/plain"]


class JupyterServer:
    """``jupyter server`` with this package's extension (its warm launcher), on 127.0.0.1."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        self.runtime = work / "server-runtime"
        self.runtime.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(work / "server.log", "wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                "--IdentityProvider.token=",
                "--no-browser",
                "--allow-root",
                "--ServerApp.disable_check_xsrf=True",
                f"--ServerApp.root_dir={work}",
                '--ServerApp.jpserver_extensions={"jupyter_disttrain.server": True}',
            ],
            env={**env, "JUPYTER_RUNTIME_DIR": str(self.runtime)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(self.url + "/api/status", timeout=2).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("jupyter server did not start") from None
                time.sleep(0.2)

    def launcher_pid(self, timeout: float = 120) -> int:
        """The server's warm launcher, once it answers (its imports done)."""
        import psutil

        from jupyter_disttrain.backends.local.launcher import ping

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in psutil.Process(self.process.pid).children():
                cmd = child.cmdline()
                if "jupyter_disttrain.runtime.zygote" in cmd:
                    return int(ping(cmd[-1], timeout)["pid"])
            time.sleep(0.2)
        raise RuntimeError("the server started no launcher")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = resp.read()
        return json.loads(text) if text else None

    def new_kernel(self) -> tuple[str, BlockingKernelClient]:
        kid = str(self.request("POST", "/api/kernels", {"name": "python3"})["id"])
        kc = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kid}.json"))
        kc.load_connection_file()
        kc.start_channels(hb=False)
        kc.wait_for_ready(timeout=120)
        return kid, kc

    def kill_kernel(self, kid: str, kc: BlockingKernelClient) -> None:
        kc.stop_channels()
        try:
            self.request("DELETE", f"/api/kernels/{kid}")
        except OSError:
            pass

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


Runner = Callable[[int], dict[str, float]]

#: Where the time of each (f) run went (:func:`breakdown` plus ``%load_ext`` and the end).
NEW_BREAKDOWNS: list[dict[str, float]] = []
#: The same for each (g) run (its "cell to submit" includes starting the kernel's launcher).
ALONE_BREAKDOWNS: list[dict[str, float]] = []
#: (h)'s: a kernel without a server, the launcher an earlier kernel left lingering.
LINGER_BREAKDOWNS: list[dict[str, float]] = []

#: The kernel's own CPU seconds in each (f)/(g)/(h) run: ``%load_ext``, the first cell, and
#: whether the kernel imported torch by the cell's end, per row label letter.
KERNEL_CPU: dict[str, list[dict[str, float]]] = {}


def new_kernel_runs(
    train: str, env: dict[str, str], work: Path, limit: float
) -> tuple[dict[str, Runner], Callable[[], None]]:
    """The brand-new-kernel runners (e) Accelerate, (f) in a server, (g) without one and no
    launcher, (h) without one after an earlier kernel; a closer."""
    script = work / "train.py"
    script.write_text(train)
    plain = {k: v for k, v in env.items() if k != ENV_WARM}
    cell = "%%distrain --nodes 2 --nproc 2 --wait\n" + train

    def in_kernel(
        kc: BlockingKernelClient, distrain: bool, row: str, name: str = ""
    ) -> dict[str, float]:
        if not distrain:
            return {"cell": execute(kc, ACCELERATE_CELL, limit)}
        _, cpu0, _ = execute_probed(kc, "", limit)
        load, cpu1, _ = execute_probed(
            kc, "%load_ext jupyter_disttrain\n%distrain_config live=none", limit
        )
        named = cell.replace("--wait", f"--wait --name {name}", 1) if name else cell
        seconds, cpu2, torch = execute_probed(kc, named, limit)
        KERNEL_CPU.setdefault(row, []).append(
            {"load_ext": cpu1 - cpu0, "cell": cpu2 - cpu1, "torch": float(torch)}
        )
        return {"load_ext": load, "cell": seconds}

    runtimes: list[Path] = []

    def runtime_folder() -> Path:
        """A Jupyter runtime folder short enough for a socket's path (``work`` may not be)."""
        runtimes.append(Path(tempfile.mkdtemp(prefix="bench-rt-", dir="/tmp")))
        return runtimes[-1]

    lingering_runtime = runtime_folder()

    def kernel_env(mark: Path, home: str, runtime: Path) -> dict[str, str]:
        return {
            **plain,
            "BENCH_MARK_FILE": str(mark),
            "BENCH_TRAIN": str(script),
            "BENCH_PORT": str(free_port()),
            "GLOO_SOCKET_IFNAME": "lo",
            "DISTRAIN_HOME": home,
            "JUPYTER_RUNTIME_DIR": str(runtime),
            lingering.ENV_LINGER: str(lingering.DEFAULT_LINGER),
        }

    def leave_launcher() -> None:
        """An earlier kernel: it loads the extension, waits for its launcher, and ends."""
        home = tempfile.mkdtemp(prefix="bench-home-", dir=work)  # removed with work
        km, kc = start_new_kernel(
            kernel_name="python3", env=kernel_env(work / "leave.mark", home, lingering_runtime)
        )
        try:
            execute(kc, "%load_ext jupyter_disttrain", limit)
            execute(kc, WAIT_LAUNCHER, limit)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)

    def standalone(row: str) -> Runner:
        def run(i: int) -> dict[str, float]:
            mark = work / f"new-{row}-{i}.mark"
            home = tempfile.mkdtemp(prefix="bench-home-", dir=work)  # removed with work
            if row == "h" and not lingering.lingering(lingering_runtime / "distrain"):
                leave_launcher()
            runtime = lingering_runtime if row == "h" else runtime_folder()
            km, kc = start_new_kernel(kernel_name="python3", env=kernel_env(mark, home, runtime))
            try:
                if row == "e":
                    return in_kernel(kc, False, "e")
                started = time.time()
                parts = in_kernel(kc, True, row, name=f"bench-{row}-{i}")
                job = Path(home) / "jobs" / f"bench-{row}-{i}"
                found = LINGER_BREAKDOWNS if row == "h" else ALONE_BREAKDOWNS
                found.append(new_kernel_breakdown(job, started, parts, mark))
                return parts
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
                if row == "g":
                    end_launchers(runtime)

        return run

    server_box: list[JupyterServer] = []

    home = work / "server-home"

    def in_server(i: int) -> dict[str, float]:
        if not server_box:
            server_env = {**plain, "GLOO_SOCKET_IFNAME": "lo", "DISTRAIN_HOME": str(home)}
            server_box.append(JupyterServer(server_env, work))
            server_box[0].launcher_pid()
        server = server_box[0]
        kid, kc = server.new_kernel()
        try:
            mark = work / f"new-f-{i}.mark"
            execute(kc, f"import os; os.environ['BENCH_MARK_FILE'] = {str(mark)!r}", limit)
            started = time.time()
            parts = in_kernel(kc, True, "f", name=f"bench-f-{i}")
            NEW_BREAKDOWNS.append(
                new_kernel_breakdown(home / "jobs" / f"bench-f-{i}", started, parts, mark)
            )
            return parts
        finally:
            server.kill_kernel(kid, kc)

    def close() -> None:
        for server in server_box:
            server.close()
        for runtime in runtimes:
            end_launchers(runtime)

    runs: dict[str, Runner] = {
        "(e) Accelerate notebook_launcher(4)": standalone("e"),
        "(f) %%distrain 2x2, kernel of a Jupyter server": in_server,
        "(g) %%distrain 2x2, kernel without a server, no launcher running": standalone("g"),
        "(h) %%distrain 2x2, kernel without a server, an earlier kernel's launcher lingering": (
            standalone("h")
        ),
    }
    return runs, close


WAIT_LAUNCHER = (
    "from jupyter_disttrain.backends.local.launcher import shared_launcher\n"
    "shared_launcher().wait_ready()"
)


def end_launchers(runtime: Path) -> None:
    """End the lingering launchers of ``runtime`` and wait until they have; remove it."""
    pids = lingering.stop_lingering(runtime / "distrain")
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(runtime, ignore_errors=True)


def new_kernel_breakdown(
    job_dir: Path, started: float, parts: dict[str, float], mark: Path
) -> dict[str, float]:
    """A brand-new kernel's run in parts: ``%load_ext``, then the cell as :func:`breakdown`
    reads it, then the rest of the cell after the first step."""
    t0 = started + parts["load_ext"]
    out = {"`%load_ext jupyter_disttrain` (imports, magics, widgets)": parts["load_ext"]}
    out.update(breakdown(job_dir, t0, mark))
    out["after the first step: 19 steps, exit, result to the cell"] = (
        t0 + parts["cell"] - _mark(mark, "step")
    )
    return out


def breakdown(job_dir: Path, t0: float, mark: Path) -> dict[str, float]:
    """A warm job's time to first step in parts, from its events, signed hellos and marks."""
    events = [
        json.loads(line)
        for line in (job_dir / "events.jsonl").read_text().splitlines()
        if line.strip()
    ]
    submitted = min(float(e["t"]) for e in events)
    started = [
        float(e["t"]) for e in events if e.get("kind") == "phase" and e.get("phase") == "started"
    ]
    hellos = []
    for log in (job_dir / "logs").glob("rank-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if '"kind":"hello"' in line and "##distrain " in line:
                body = line.split("##distrain ", 1)[1]
                hellos.append(float(json.loads(body[: body.rindex("}") + 1])["t"]))
    ddp, step = (_mark(mark, w) for w in ("ddp", "step"))
    return {
        "cell to submit (capture, payload, plan)": submitted - t0,
        "agents forked, rendezvous, workers forked (to last `started`)": max(started) - submitted,
        "process group (to last `hello`)": max(hellos) - max(started),
        "DDP construction (rank 0)": ddp - max(hellos),
        "first step (rank 0)": step - ddp,
    }


def _mark(path: Path, what: str) -> float:
    for line in path.read_text().splitlines():
        name, _, t = line.partition(" ")
        if name == what:
            return float(t)
    raise ValueError(f"no {what} mark in {path}")
