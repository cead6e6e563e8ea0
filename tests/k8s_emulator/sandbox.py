"""A pod's sandbox on the pod network: its namespace, its hosts file, its containers' argv.

With a :class:`podnet.PodNetwork` the kubelet gives each pod (not
``hostNetwork``) a network namespace and address, writes its ``/etc/hosts``
(:mod:`hosts`) and ``/etc/hostname``, and starts each container through
:mod:`podexec` with the manifest's command, arguments and environment as they
are (``$(VAR)`` expanded, as the kubelet does; nothing rewritten).
:class:`HostsWriter` keeps every pod's hosts file current as pods and
Services come and go.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from . import hosts, podexec, warmimage
from .container import ConfigError
from .meta import Obj
from .resources import SERVICES
from .rewrite import expand
from .volumes import mounts

if TYPE_CHECKING:
    from .kubelet import PodWorker
    from .podnet import PodNetwork
    from .store import Store

#: A command naming Python: this machine's interpreter stands for the image's.
PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")


class HostsWriter:
    """Rewrites the hosts files of the pods on the pod network when pods or Services change
    (a thread woken by :meth:`changed`; :meth:`refresh` does it at once, :meth:`sync` waits
    for the thread's next refresh).

    A refresh renders each namespace's records once and costs one file write a pod, so a
    burst of pods starting together shares refreshes instead of each pod rewriting every
    other pod's file (which made starting N pods cost N^3)."""

    #: Seconds :meth:`sync` waits for the thread's refresh.
    SYNC_SECONDS = 60.0

    def __init__(self, store: Store, workers: Callable[[], list[PodWorker]]) -> None:
        self.store, self.workers = store, workers
        #: Services the emulator serves itself: (namespace, name) -> its address.
        self.served: dict[tuple[str, str], str] = {}
        #: Services whose names resolve to nothing (a fault, see :mod:`netfaults`).
        self.hidden: set[tuple[str, str]] = set()
        self._dirty = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._asked = 0  # refreshes asked for by :meth:`sync`, numbered
        self._covered = 0  # the highest of those numbers a finished refresh covered
        self._progress = threading.Condition()
        self._error: Exception | None = None  # what the thread's last refresh raised
        self._thread = threading.Thread(target=self._loop, name="kubelet-hosts", daemon=True)
        self._thread.start()

    def changed(self) -> None:
        self._dirty.set()

    def sync(self) -> None:
        """Return once a refresh that began after this call has finished (so every pod's file
        knows what the store and the workers hold now); several callers share one refresh."""
        with self._progress:
            self._asked += 1
            mine = self._asked
        self._dirty.set()
        with self._progress:
            self._progress.wait_for(
                lambda: self._covered >= mine or self._closed, self.SYNC_SECONDS
            )
            error = self._error
        if error is not None:
            raise RuntimeError(f"the pods' hosts files could not be written: {error!r}")

    def refresh(self) -> None:
        with self._lock:
            workers = self.workers()
            peers = [(w.pod, w.address) for w in workers if w.attached]
            services = [
                s
                for s in self.store.objects(SERVICES.key)[0]
                if (s["metadata"]["namespace"], s["metadata"]["name"]) not in self.hidden
            ]
            by_namespace: dict[str, str] = {}
            for worker in workers:
                path = worker.hosts_file
                if path is not None and worker.attached and not worker.stopping.is_set():
                    own = worker.pod["metadata"]["namespace"]
                    if own not in by_namespace:
                        by_namespace[own] = hosts.records(own, services, peers, self.served)
                    text = hosts.render(worker.pod, worker.address, by_namespace[own])
                    hosts.write(path, text)

    def close(self) -> None:
        self._closed = True
        self._dirty.set()
        self._thread.join(timeout=10)
        with self._progress:
            self._progress.notify_all()

    def _loop(self) -> None:
        while True:
            self._dirty.wait()
            if self._closed:
                return
            self._dirty.clear()
            with self._progress:
                asked = self._asked
            try:
                self.refresh()
                error = None
            except Exception as exc:  # raised in the pods' setups that wait (sync)
                error = exc
            with self._progress:
                self._error = error
                self._covered = asked
                self._progress.notify_all()


def attach(worker: PodWorker, podnet: PodNetwork) -> float:
    """Give ``worker``'s pod its network namespace (unless ``hostNetwork``), hosts file and
    host name file; the seconds it took."""
    began = time.perf_counter()
    spec = worker.pod["spec"]
    if not spec.get("hostNetwork"):
        name, worker.address = podnet.attach(worker.uid)
        worker.netns = podnet.path(name)
    worker.dir.mkdir(parents=True, exist_ok=True)
    (worker.dir / "etc-hostname").write_text(f"{hostname(worker.pod)}\n")
    worker.hosts_file = worker.dir / "etc-hosts"
    worker.hosts_file.write_text(hosts.HEADER)
    with worker.lock:
        worker.attached = True
    return time.perf_counter() - began


def hostname(pod: Obj) -> str:
    """The pod's host name: ``spec.hostname``, else its name (at most 63 characters)."""
    return str(pod["spec"].get("hostname") or pod["metadata"]["name"])[:63]


def container_argv(
    worker: PodWorker, spec: Obj, env: dict[str, str], cwd: str, full_env: dict[str, str]
) -> list[str]:
    """The argv starting container ``spec`` of ``worker``'s pod inside its sandbox (``env``
    the manifest's, ``full_env`` the process's, with the kubelet's own variables)."""
    command = [expand(part, env) for part in spec.get("command", [])]
    args = [expand(part, env) for part in spec.get("args", [])]
    argv = command + args
    if not argv:
        raise ConfigError("no command specified")
    if PYTHON.match(argv[0]):
        argv[0] = sys.executable
    binds: list[tuple[str, str, bool]] = []
    for (path, local), mount in zip(
        mounts(spec, worker.volumes, worker.dir), spec.get("volumeMounts", []), strict=True
    ):
        binds.append((local, path, bool(mount.get("readOnly"))))
    for local, path, _ in sorted(binds, key=lambda b: -len(b[1])):
        if cwd == path or cwd.startswith(path.rstrip("/") + "/"):
            # made in the volume, as the runtime makes it (an error here fails the start)
            Path(local, cwd[len(path) :].lstrip("/")).mkdir(parents=True, exist_ok=True)
            break
    assert worker.hosts_file is not None
    binds.append((str(worker.hosts_file), "/etc/hosts", True))
    binds.append((str(worker.dir / "etc-hostname"), "/etc/hostname", True))
    config = {
        "netns": worker.netns,
        "hostname": hostname(worker.pod),
        # each container has a root of its own, as a runtime gives each its image's filesystem
        # (one shared root had two containers racing to make the same entries)
        "root": str(worker.dir / "roots" / spec["name"]),
        "mounts": binds,
        "cwd": cwd,
        "argv": argv,
        "warm": warmimage.IMAGES.socket_for(argv, full_env) if worker.kubelet.warm_image else None,
    }
    return podexec.launch_argv(sys.executable, config)
