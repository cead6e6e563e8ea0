"""One container of a pod: image pull, process runs and restarts (see :mod:`kubelet`).

Each run is one process group started with the pod's environment and the
container's marker (:mod:`procs`), its stdout and stderr going to the
container's log; its state (``waiting``, ``running``, ``terminated``) and
restarts follow the processes and the pod's ``restartPolicy``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from jupyter_disttrain.runtime.standin import ENV_RENDEZVOUS

from . import procs
from .logs import ContainerLog
from .meta import Obj, now
from .standin import node_of, nodes_of, run_hosted

if TYPE_CHECKING:
    from .kubelet import PodWorker


class ConfigError(Exception):
    """A container's configuration refers to something missing (CreateContainerConfigError)."""


class ContainerRunner:
    """One container of a pod: image pull, process runs and restarts."""

    def __init__(self, worker: PodWorker, spec: Obj, index: int, *, init: bool = False) -> None:
        self.worker = worker
        self.spec = spec
        self.init = init  # an init container: runs to success before the others start
        self.name: str = spec["name"]
        self.image: str = spec.get("image", "")
        waiting = (
            "PodInitializing" if worker.pod["spec"].get("initContainers") else "ContainerCreating"
        )
        self.state: Obj = {"waiting": {"reason": "ContainerCreating" if init else waiting}}
        self.last_state: Obj = {}
        self.restart_count = 0
        self.ever_started = False
        self.finished = False
        self.exit_code: int | None = None
        self.logs: list[ContainerLog] = []
        self.container_id: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._marker = ""
        self._oom = False
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"container-{worker.name}-{self.name}"
        )

    @property
    def running(self) -> bool:
        return "running" in self.state

    def waiting_reason(self) -> str:
        return str(self.state.get("waiting", {}).get("reason", "ContainerCreating"))

    def status(self) -> Obj:
        out: Obj = {
            "name": self.name,
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.running,
            "restartCount": self.restart_count,
            "image": self.image,
            "imageID": f"emulator://{self.image}" if self.ever_started else "",
            "started": self.running,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        """Whether the container's thread (its process and restarts) still runs."""
        return self._thread.is_alive()

    def _set(self, **state: Any) -> None:
        with self.worker.lock:
            self.state = state
        self.worker.publish()

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the pod is stopping; False when it is."""
        return not self.worker.stopping.wait(seconds)

    # --- the container's life ------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._live()
        except Exception as exc:  # in the container's state and an Event, not lost
            self._set(waiting={"reason": "RunContainerError", "message": repr(exc)})
            self.worker.event("Warning", "Failed", f"Error: {exc!r}", self.name)

    def _live(self) -> None:
        worker = self.worker
        policy = worker.pod["spec"].get("restartPolicy", "Always")
        if not self._pull():
            return
        while not worker.stopping.is_set():
            try:
                argv, env, cwd = worker.prepare(self.spec)
            except ConfigError as exc:
                self._set(waiting={"reason": "CreateContainerConfigError", "message": str(exc)})
                worker.event("Warning", "Failed", f"Error: {exc}", self.name)
                if not self._wait(self.worker.kubelet.restart_backoff):
                    return
                continue
            exit_code, terminated = self._execute(argv, env, cwd)
            with worker.lock:
                self.exit_code = exit_code
                self.state = {"terminated": terminated}
                if self.init:  # restarted only when it failed, and never with Never
                    restart = policy != "Never" and exit_code != 0
                else:
                    restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
                if not restart or worker.stopping.is_set():
                    self.finished = True
            worker.publish()
            if self.finished:
                return
            message = (
                f"back-off {self.worker.kubelet.restart_backoff:g}s restarting failed "
                f"container={self.name} pod={worker.name}_{worker.namespace}({worker.uid})"
            )
            with worker.lock:
                self.last_state = {"terminated": terminated}
            self._set(waiting={"reason": "CrashLoopBackOff", "message": message})
            worker.event(
                "Warning",
                "BackOff",
                f"Back-off restarting failed container "
                f"{self.name} in pod {worker.name}_{worker.namespace}({worker.uid})",
                self.name,
            )
            if self.restart_count >= worker.kubelet.max_restarts:
                worker.stopping.wait()  # stays in CrashLoopBackOff
                return
            if not self._wait(worker.kubelet.restart_backoff):
                return
            with worker.lock:
                self.restart_count += 1

    def _pull(self) -> bool:
        worker, image = self.worker, self.image
        faults = worker.kubelet.faults
        always = self.spec.get("imagePullPolicy") == "Always"
        delay = faults.pull_delay(image)
        if faults.pullable(image) and not always and delay <= 0:
            worker.event(
                "Normal",
                "Pulled",
                f'Container image "{image}" already present on machine',
                self.name,
            )
            return True
        worker.event("Normal", "Pulling", f'Pulling image "{image}"', self.name)
        began = time.monotonic()
        while not faults.pullable(image):
            error = (
                f"rpc error: code = NotFound desc = failed to pull and unpack image "
                f'"{image}": not found (the emulator treats this image as not pullable)'
            )
            self._set(waiting={"reason": "ErrImagePull", "message": error})
            worker.event("Warning", "Failed", f'Failed to pull image "{image}": {error}', self.name)
            worker.event("Warning", "Failed", "Error: ErrImagePull", self.name)
            if not self._wait(worker.kubelet.image_backoff):
                return False
            self._set(
                waiting={
                    "reason": "ImagePullBackOff",
                    "message": f'Back-off pulling image "{image}"',
                }
            )
            worker.event("Normal", "BackOff", f'Back-off pulling image "{image}"', self.name)
            worker.event("Warning", "Failed", "Error: ImagePullBackOff", self.name)
            if not self._wait(worker.kubelet.image_backoff):
                return False
            began = time.monotonic()  # the pull that works starts now
        if delay > 0 and not self._wait(delay):
            return False
        took = go_duration(time.monotonic() - began)
        worker.event(
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {took} ({took} including waiting). '
            "Image size: 0 bytes.",
            self.name,
        )
        return True

    def _execute(self, argv: list[str], env: dict[str, str], cwd: str) -> tuple[int, Obj]:
        """Run the container's process to its end; its exit code and terminated state."""
        worker = self.worker
        run = len(self.logs)
        log = ContainerLog()
        raw_env = worker._env(self.spec)  # as written: loopback rewrites Service-like values
        hosted = worker.kubelet.standins.job(raw_env)  # a scale test's pod: see standin.py
        node = node_of(raw_env)
        if hosted is not None and node != 0:
            return run_hosted(self, hosted, node, log)
        if hosted is not None:
            hosted.attach(0, log)
        self._marker = f"{worker.marker}{self.name}/{run}/"
        self.container_id = f"emulator://{uuid.uuid4().hex}"
        started = now()
        gated = hosted is not None and nodes_of(raw_env) is not None
        extra = {ENV_RENDEZVOUS: "1"} if gated else {}
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env={**env, procs.MARKER: self._marker, **extra},
                stdin=subprocess.PIPE if gated else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            message = (
                f"failed to create containerd task: failed to create shim task: OCI "
                f'runtime create failed: exec: "{argv[0]}": {exc.strerror}'
            )
            worker.event("Warning", "Failed", f"Error: {message}", self.name)
            log.close()
            self.logs.append(log)
            return 128, {
                "exitCode": 128,
                "reason": "StartError",
                "message": message,
                "startedAt": started,
                "finishedAt": now(),
                "containerID": self.container_id,
            }
        with worker.lock:
            self._proc, self._oom = proc, False
            self.logs.append(log)
            self.ever_started = True
            self.state = {"running": {"startedAt": started}}
        if worker.stopping.is_set():  # deleted while starting: terminate() may have missed it
            procs.kill_all(self._marker, proc.pid)
        worker.event("Normal", "Created", f"Created container {self.name}", self.name)
        worker.event("Normal", "Started", f"Started container {self.name}", self.name)
        worker.publish()
        if gated:
            assert hosted is not None and proc.stdin is not None
            hosted.hold(proc.stdin, nodes_of(raw_env) or 0)
        if hosted is not None:  # the stand-in's output: every hosted node's log
            reader = threading.Thread(target=hosted.pump, args=(proc,), daemon=True)
        else:
            reader = threading.Thread(target=_pump, args=(proc, log), daemon=True)
        reader.start()
        code = proc.wait()
        procs.kill_all(self._marker, proc.pid)  # the container ends with its first process
        reader.join(timeout=10)
        log.close()
        exit_code = 128 - code if code < 0 else code
        with worker.lock:
            self._proc = None
            oom = self._oom
        reason = "OOMKilled" if oom else ("Completed" if exit_code == 0 else "Error")
        terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now(),
            "containerID": self.container_id,
        }
        if code < 0:
            terminated["signal"] = -code
        if exit_code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines, _ = log.read(0)  # the kubelet keeps the last 80 lines, at most 2048 bytes
            tail = b"".join(line for _, line in lines[-80:])[-2048:]
            terminated["message"] = tail.decode("utf-8", "replace")
        return exit_code, terminated

    def kill(self, sig: int, *, oom: bool = False) -> None:
        """Signal the container's first process (a fault: the process dies, the pod lives)."""
        with self.worker.lock:
            proc = self._proc
            self._oom = self._oom or oom
        if proc is not None:
            os.kill(proc.pid, sig)

    def terminate(self, grace: float) -> None:
        """Stop the running process as a container runtime does: SIGTERM to the container's
        first process only (what it started hears of it from it), then SIGKILL to every
        process of the container after ``grace`` seconds."""
        with self.worker.lock:
            proc, marker = self._proc, self._marker
        if proc is None:
            return
        self.worker.event("Normal", "Killing", f"Stopping container {self.name}", self.name)
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        procs.kill_all(marker, proc.pid)


def _pump(proc: subprocess.Popen[bytes], log: ContainerLog) -> None:
    assert proc.stdout is not None
    with proc.stdout:
        for line in iter(proc.stdout.readline, b""):
            log.append(line, time.time())


def go_duration(seconds: float) -> str:
    """A duration as the kubelet prints it (Go's ``Duration.String`` of a ms-truncated value)."""
    ms = int(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    hours, minutes = divmod(minutes, 60)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    return f"{minutes}m{secs}" if minutes else secs
