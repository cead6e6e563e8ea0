"""The kubelet (and the scheduler): runs each pod's containers as local process groups.

A pod is scheduled (unless a fault keeps it Pending with a ``FailedScheduling``
Event), its volumes are materialised under a per-pod directory, and each
container's ``command`` + ``args`` run as one process group with the pod's
environment, stdout and stderr going to the container's log. Container states
and the pod phase follow the processes; ``restartPolicy`` restarts containers
in place (``restartCount``, ``CrashLoopBackOff``). Deleting a pod stops its
processes (SIGTERM, then SIGKILL after the grace period) before the pod object
goes away; every process of a container (found by its environment marker,
see :mod:`procs`) is killed when the container ends, as a container's PID
namespace would be.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import procs
from .apiserver import ApiServer
from .container import ConfigError, ContainerRunner
from .faults import Faults
from .logs import ContainerLog
from .meta import ApiError, Obj, bad_request, now
from .netfaults import ANNOTATION as FAULT
from .netfaults import NetFaults
from .podenv import PodEnv
from .podnet import PodNetwork
from .resources import CONFIGMAPS, PODS, SECRETS, SERVICES
from .rewrite import Network, expand, path_rewriter
from .sandbox import PYTHON, HostsWriter, attach, container_argv
from .standin import StandinPods, runs_elsewhere
from .store import ADDED, DELETED, MODIFIED, Event
from .volumes import MountError, materialise, mounts, refresh_downward

_PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")


def write_shims(directory: Path) -> Path:
    """``python``, ``python3``, ``torchrun`` (this interpreter) and ``nslookup`` on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    python = shlex.quote(sys.executable)
    scripts = {
        "python": f'exec {python} "$@"',
        "python3": f'exec {python} "$@"',
        "torchrun": f'exec {python} -m torch.distributed.run "$@"',
        # the Training Operator's init-pytorch waits for the master's name (already local here)
        "nslookup": f'exec {python} -c "import socket,sys; socket.getaddrinfo(sys.argv[1], None)" '
        '"$1" >/dev/null 2>&1',
    }
    for name, body in scripts.items():
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return directory


@dataclass(frozen=True)
class KubeletSettings:
    """The kubelet's node name and timing (seconds)."""

    node_name: str = "emulator-node"
    #: Pause between a crash and the restart (``CrashLoopBackOff``).
    restart_backoff: float = 0.2
    #: Restarts after which a crashing container stays in ``CrashLoopBackOff``.
    max_restarts: int = 5
    #: Upper bound on termination grace periods (SIGTERM, then SIGKILL).
    grace_cap: float = 2.0
    #: Pause between image pull attempts (``ErrImagePull``, ``ImagePullBackOff``).
    image_backoff: float = 0.3
    #: Extra variables for every container process.
    base_env: dict[str, str] = field(default_factory=dict)
    #: Training pods fork from a warm image (:mod:`warmimage`) instead of importing afresh
    #: (None: unless ``K8S_EMULATOR_WARM_IMAGE=0``).
    warm_image: bool | None = None


class Kubelet:
    """Runs pods; one :class:`PodWorker` thread per pod."""

    def __init__(
        self,
        api: ApiServer,
        network: Network,
        faults: Faults,
        root: Path,
        emulator_id: str,
        settings: KubeletSettings,
        podnet: PodNetwork | None = None,
    ) -> None:
        self.api, self.network, self.faults = api, network, faults
        #: The pod network (None: pods share this host's loopback, see :mod:`rewrite`).
        self.podnet = podnet
        #: Seconds each pod's sandbox network took to set up (namespace, veth, hosts file).
        self.setup_times: list[float] = []
        self.root = root
        self.emulator_id = emulator_id
        self.node_name = settings.node_name
        self.restart_backoff = settings.restart_backoff
        self.max_restarts = settings.max_restarts
        self.grace_cap = settings.grace_cap
        self.image_backoff = settings.image_backoff
        self.shim_dir = write_shims(root / "bin")
        env = {key: os.environ[key] for key in _PASS_ENV if key in os.environ}
        env["PATH"] = f"{self.shim_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        self.base_env = {**env, **settings.base_env}
        self.warm_image = settings.warm_image
        if self.warm_image is None:
            self.warm_image = os.environ.get("K8S_EMULATOR_WARM_IMAGE") != "0"
        self._lock = threading.Lock()
        self._workers: dict[str, PodWorker] = {}
        self._closed = False
        self.hosts: HostsWriter | None = None
        #: Faults of the pod network (None without one).
        self.net_faults: NetFaults | None = None
        if podnet is not None:
            self.hosts = HostsWriter(api.store, self.workers)
            self.net_faults = NetFaults(self)
        #: Jobs whose pods' ranks run in one stand-in process (:mod:`standin`).
        self.standins = StandinPods()
        self._unsubscribe = api.store.subscribe(self._on_event)

    def workers(self) -> list[PodWorker]:
        """The pod workers of the pods that exist."""
        with self._lock:
            return list(self._workers.values())

    # --- events from the store (called with the store lock held: never block) ------------

    def _on_event(self, event: Event) -> None:
        if self.hosts is not None and event.resource in (PODS.key, SERVICES.key):
            if event.resource == SERVICES.key or event.type != MODIFIED:
                self.hosts.changed()
        if event.resource == SERVICES.key and event.type == DELETED:
            meta = event.obj["metadata"]
            self.network.release(meta["namespace"], meta["name"])
            return
        if event.resource != PODS.key:
            return
        uid = event.obj["metadata"]["uid"]
        with self._lock:
            worker = self._workers.get(uid)
            if event.type == ADDED and worker is None and not self._closed:
                worker = PodWorker(self, event.obj)
                self._workers[uid] = worker
                worker.start()
            elif worker is not None and event.type == DELETED:
                worker.request_stop(0.0, removed=True)
                del self._workers[uid]
            elif worker is not None and event.type == MODIFIED:
                meta = event.obj["metadata"]
                if meta.get("deletionTimestamp"):
                    worker.request_stop(float(meta.get("deletionGracePeriodSeconds") or 0))
                elif worker.volumes:  # annotations and labels reach the downward-API files
                    refresh_downward(event.obj, worker.volumes)
                if self.net_faults is not None and FAULT in (meta.get("annotations") or {}):
                    threading.Thread(
                        target=self.net_faults.from_annotation,
                        args=(event.obj,),
                        name="net-fault",
                        daemon=True,
                    ).start()

    # --- queries and faults --------------------------------------------------------------

    def worker(self, pod: Obj) -> PodWorker | None:
        with self._lock:
            return self._workers.get(pod["metadata"]["uid"])

    def log(self, pod: Obj, container: str | None, previous: bool) -> ContainerLog:
        """The log the ``log`` subresource serves, or the API server's 400 explaining why not."""
        name = pod["metadata"]["name"]
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        every = names + [c["name"] for c in pod["spec"].get("initContainers", [])]
        if container is None:
            if len(names) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]"
                )
            container = names[0]
        if container not in every:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if not pod["spec"].get("nodeName"):
            raise bad_request(f"pod {name} does not have a host assigned")
        worker = self.worker(pod)
        runner = worker.runner(container) if worker else None
        runs = list(runner.logs) if runner else []
        if previous:
            if len(runs) < 2:
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            return runs[-2]
        if not runs:
            reason = runner.waiting_reason() if runner else "ContainerCreating"
            if reason in ("ErrImagePull", "ImagePullBackOff"):
                reason = "trying and failing to pull image"
            raise bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        return runs[-1]

    def signal_container(
        self, pod: Obj, container: str | None, sig: int, *, oom: bool = False
    ) -> None:
        worker = self.worker(pod)
        runner = None
        if worker is not None:
            runner = worker.containers.get(container or next(iter(worker.containers), ""))
        if runner is None or not runner.running:
            raise ValueError(f"pod {pod['metadata']['name']} has no running container {container}")
        runner.kill(sig, oom=oom)

    # --- shutdown ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every pod and kill every process the kubelet started."""
        self._unsubscribe()
        with self._lock:
            self._closed = True
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.request_stop(0.0, removed=True)
        for worker in workers:
            worker.join(timeout=15)
        procs.kill_all(f"{self.emulator_id}/")
        if self.hosts is not None:
            self.hosts.close()


class PodWorker(threading.Thread, PodEnv):
    """Schedules, sets up and runs one pod, then tears it down when it is deleted."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"kubelet-{meta['name']}", daemon=True)
        self.kubelet = kubelet
        self.api = kubelet.api
        self.pod = pod
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = kubelet.root / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        #: TMPDIR, short as a container's /tmp: a Unix socket's path in it fits 108 bytes
        self.tmp = kubelet.root / "tmp" / self.uid[:8]
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.grace = 0.0
        self.removed = False
        self.containers: dict[str, ContainerRunner] = {}
        self.inits: dict[str, ContainerRunner] = {}
        self.init_failed = False  # an init container failed and will not be restarted
        self.scheduled: str | None = None  # message when unschedulable
        self.sandbox_ready = False
        self.start_time: str | None = None
        self.volumes: dict[str, Path] = {}
        #: On the pod network: its address, namespace path, hosts file (see :mod:`sandbox`).
        self.address = "127.0.0.1"
        self.netns: str | None = None
        self.hosts_file: Path | None = None
        self.attached = False
        self._conditions: dict[str, Obj] = {}
        #: Status snapshots taken and the last written (container threads publish apart)
        self._snapshots_taken = 0
        self._snapshot_written = 0

    @property
    def marker(self) -> str:
        return f"{self.kubelet.emulator_id}/{self.uid}/"

    # --- lifecycle -----------------------------------------------------------------------

    def request_stop(self, grace: float, *, removed: bool = False) -> None:
        with self.lock:
            self.grace = min(grace, self.kubelet.grace_cap)
            self.removed = self.removed or removed
        self.stopping.set()

    def run(self) -> None:
        try:
            if self._schedule() and self._setup():
                if self._initialise():
                    for runner in self.containers.values():
                        runner.start()
                self.stopping.wait()
        except Exception as exc:  # on the pod (an Event), not lost with the thread
            self.api.record_event(
                self.pod,
                "Warning",
                "Failed",
                f"kubelet error: {exc!r}",
                "kubelet",
                host=self.kubelet.node_name,
            )
            self.stopping.wait()
        finally:
            self._teardown()

    def _schedule(self) -> bool:
        reported = None
        while not self.stopping.is_set():
            message = self.kubelet.faults.unschedulable(self.pod)
            if message is None:
                break
            if message != reported:
                self.scheduled = message
                self._set_condition("PodScheduled", "False", "Unschedulable", message)
                self.publish()
                self.api.record_event(
                    self.pod, "Warning", "FailedScheduling", message, "default-scheduler"
                )
                reported = message
            self.stopping.wait(0.1)
        if self.stopping.is_set():
            return False
        self.scheduled = None
        self._set_condition("PodScheduled", "True")
        node = self.kubelet.node_name
        bound = self._mutate(lambda o: o["spec"].update(nodeName=node))
        if bound is None:  # deleted (and perhaps made again under the same name) meanwhile
            return False
        self.pod = bound
        self.api.record_event(
            self.pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {self.namespace}/{self.name} to {node}",
            "default-scheduler",
        )
        self.start_time = now()
        self._set_condition("Initialized", "True")
        for index, spec in enumerate(self.pod["spec"].get("containers", [])):
            self.containers[spec["name"]] = ContainerRunner(self, spec, index)
        self.publish()
        return True

    def _setup(self) -> bool:
        """Materialise the volumes, retrying while a ConfigMap or Secret is missing."""
        reported = None
        while not self.stopping.is_set():
            try:
                self.volumes = materialise(
                    self.pod, self.dir, self.kubelet.root / "claims", self._lookup, self._token
                )
                break
            except MountError as exc:
                if str(exc) != reported:
                    self.api.record_event(
                        self.pod,
                        "Warning",
                        "FailedMount",
                        str(exc),
                        "kubelet",
                        host=self.kubelet.node_name,
                    )
                    reported = str(exc)
                self.stopping.wait(0.2)
        if self.stopping.is_set():
            return False
        (self.dir / "rootfs").mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        podnet, hosts = self.kubelet.podnet, self.kubelet.hosts
        if podnet is not None and hosts is not None and not self._runs_elsewhere():
            self.kubelet.setup_times.append(attach(self, podnet))
            hosts.sync()  # with the other pods starting now: one refresh for them all
        self.sandbox_ready = True
        self.publish()
        return True

    def _runs_elsewhere(self) -> bool:
        containers = self.pod["spec"].get("containers") or [{}]
        try:
            return runs_elsewhere(self._env(containers[0]))
        except ConfigError:
            return False

    def _initialise(self) -> bool:
        """Run the init containers in order, each to success; False if one failed for good."""
        specs = self.pod["spec"].get("initContainers", [])
        with self.lock:
            for index, spec in enumerate(specs):
                self.inits[spec["name"]] = ContainerRunner(self, spec, index, init=True)
        if specs:
            self.publish()
        for name, runner in list(self.inits.items()):
            self._set_condition(
                "Initialized",
                "False",
                "ContainersNotInitialized",
                f"containers with incomplete status: [{name}]",
            )
            runner.start()
            while runner.is_alive() and not self.stopping.is_set():
                runner.join(0.1)  # a pod deleted meanwhile: the teardown ends the container
            if self.stopping.is_set():
                return False
            if runner.exit_code != 0:
                with self.lock:
                    self.init_failed = True
                self.publish()
                return False
        self._set_condition("Initialized", "True")
        self.publish()
        return True

    def runner(self, name: str) -> ContainerRunner | None:
        """The container (or init container) ``name`` of this pod."""
        return self.containers.get(name) or self.inits.get(name)

    def _token(self, audience: str, expiry: int) -> str:
        return self.api.tokens.issue(self.pod, audience, expiry)

    def _lookup(self, plural: str, name: str) -> Obj | None:
        resource = SECRETS if plural == "secrets" else CONFIGMAPS
        return self.api.store.get(resource.key, self.namespace, name)

    def _teardown(self) -> None:
        with self.lock:
            grace = self.grace
        runners = list(self.containers.values()) + list(self.inits.values())
        stoppers = [
            threading.Thread(target=r.terminate, args=(grace,), daemon=True) for r in runners
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        for runner in runners:
            runner.join()
        procs.kill_all(self.marker)
        with self.lock:
            removed = self.removed
            self.attached = False
        if self.kubelet.podnet is not None:
            self.kubelet.podnet.detach(self.uid)
        if not removed:
            try:
                self.api.delete(
                    PODS, self.namespace, self.name, grace=0, preconditions={"uid": self.uid}
                )
            except ApiError:
                pass  # already gone, or a new pod under its name
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- status --------------------------------------------------------------------------

    def _set_condition(
        self, kind: str, status: str, reason: str | None = None, message: str | None = None
    ) -> None:
        with self.lock:
            current = self._conditions.get(kind)
            condition: Obj = {"type": kind, "status": status, "lastProbeTime": None}
            if current and current["status"] == status:
                condition["lastTransitionTime"] = current["lastTransitionTime"]
            else:
                condition["lastTransitionTime"] = now()
            if reason:
                condition["reason"] = reason
            if message:
                condition["message"] = message
            self._conditions[kind] = condition

    def _phase(self) -> str:
        if self.init_failed:
            return "Failed"
        runners = list(self.containers.values())
        if not runners or not all(r.ever_started or r.finished for r in runners):
            return "Pending"
        if all(r.finished for r in runners):
            return "Succeeded" if all(r.exit_code == 0 for r in runners) else "Failed"
        return "Running"

    def status(self) -> Obj:
        with self.lock:
            phase = self._phase()
            runners = list(self.containers.values())
            if runners:
                self._set_condition(
                    "PodReadyToStartContainers", "True" if self.sandbox_ready else "False"
                )
                unready = [r.name for r in runners if not r.running]
                ready: tuple[str, str | None, str | None]
                if phase in ("Succeeded", "Failed"):
                    ready = ("False", "PodCompleted", None)
                elif unready:
                    ready = (
                        "False",
                        "ContainersNotReady",
                        f"containers with unready status: [{' '.join(unready)}]",
                    )
                else:
                    ready = ("True", None, None)
                self._set_condition("ContainersReady", *ready)
                self._set_condition("Ready", *ready)
            order = [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            ]
            status: Obj = {
                "phase": phase,
                "conditions": [self._conditions[k] for k in order if k in self._conditions],
            }
            if self.start_time:
                status.update(
                    hostIP="127.0.0.1", hostIPs=[{"ip": "127.0.0.1"}], startTime=self.start_time
                )
                if self.sandbox_ready:  # the address comes with the sandbox
                    status.update(podIP=self.address, podIPs=[{"ip": self.address}])
                if self.inits:
                    status["initContainerStatuses"] = [r.status() for r in self.inits.values()]
                status["containerStatuses"] = [r.status() for r in runners]
            status["qosClass"] = "BestEffort"
            return status

    def publish(self) -> None:
        """Write the pod's status now, unless another thread wrote a newer snapshot first."""
        with self.lock:
            status = self.status()
            self._snapshots_taken += 1
            snapshot = self._snapshots_taken

        def write(obj: Obj) -> None:  # under the store's lock: writes are serialised
            if snapshot > self._snapshot_written:
                obj["status"] = status
                self._snapshot_written = snapshot

        self._mutate(write)

    def _mutate(self, change: Callable[[Obj], Any]) -> Obj | None:
        """Change this pod (this uid: never a pod made again under its name); None, and the
        worker stops, when it is gone."""

        def mine(obj: Obj) -> None:
            if obj["metadata"]["uid"] == self.uid:
                change(obj)

        stored = self.api.mutate(PODS, self.namespace, self.name, mine)
        if stored is None or stored["metadata"]["uid"] != self.uid:
            self.stopping.set()
            return None
        return stored

    def event(self, event_type: str, reason: str, message: str, container: str) -> None:
        """A kubelet Event about ``container`` (``spec.initContainers{...}`` for an init one)."""
        kind = "initContainers" if container in self.inits else "containers"
        self.api.record_event(
            self.pod,
            event_type,
            reason,
            message,
            "kubelet",
            host=self.kubelet.node_name,
            field_path=f"spec.{kind}{{{container}}}",
        )

    # --- container configuration ---------------------------------------------------------

    def prepare(self, spec: Obj) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working directory of a container: on the pod network as the
        manifest says (see :mod:`sandbox`), else adapted to this host's loopback."""
        env = self._env(spec)
        if self.hosts_file is not None:
            return self._sandboxed(spec, env)
        rewrite_paths = path_rewriter(mounts(spec, self.volumes, self.dir))
        env = {key: rewrite_paths(value) for key, value in env.items()}
        env = self.kubelet.network.rewrite_env(self.namespace, env)
        command = [expand(part, env) for part in spec.get("command", [])]
        args = [expand(part, env) for part in spec.get("args", [])]
        argv = [
            self.kubelet.network.rewrite(self.namespace, rewrite_paths(p)) for p in command + args
        ]
        if not argv:
            raise ConfigError("no command specified")
        if PYTHON.match(argv[0]):
            argv[0] = sys.executable
        workdir = spec.get("workingDir")
        if workdir:
            local = rewrite_paths(workdir)
            cwd = Path(local) if local != workdir else self.dir / "rootfs" / workdir.lstrip("/")
        else:
            cwd = self.dir / "rootfs"
        cwd.mkdir(parents=True, exist_ok=True)
        return argv, self._full_env(env), str(cwd)

    def _sandboxed(self, spec: Obj, env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
        cwd = spec.get("workingDir") or str(self.dir / "rootfs")
        full = self._full_env(env)
        return container_argv(self, spec, env, cwd, full), full, str(self.dir)
