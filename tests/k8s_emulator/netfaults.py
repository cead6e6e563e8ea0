"""Network faults on the pod network, as a test API and as a pod annotation.

* :meth:`NetFaults.link_down`: the pod's ``eth0`` goes down (for ``seconds``,
  then up again, or for good): a node cut off from the others.
* :meth:`NetFaults.drop_between`: traffic between two pods is dropped
  silently (each one's neighbour entry for the other points at a MAC no pod
  has: frames leave and are never taken in), the rest flows.
* :meth:`NetFaults.hide_service`: a Service's names resolve to nothing in
  every pod's hosts file (the master's name unknown).
* :meth:`NetFaults.kill_node`: every process of the pod is killed at once and
  its link taken down, as when the node it runs on dies.
* :meth:`NetFaults.heal`: undo every fault.

The annotation ``k8s-emulator.disttrain/fault`` on a pod
(``kubectl annotate pod NAME k8s-emulator.disttrain/fault=link-down:10``) arms
the same: ``link-down`` (for good), ``link-down:SECONDS``, ``drop:OTHER-POD``,
``kill-node``; each value acts once.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from typing import TYPE_CHECKING

from . import procs
from .meta import Obj
from .resources import PODS

if TYPE_CHECKING:
    from .kubelet import Kubelet, PodWorker

ANNOTATION = "k8s-emulator.disttrain/fault"
#: A locally administered MAC no pod has (where dropped traffic is sent).
BLACKHOLE_MAC = "02:00:00:00:de:ad"


class NetFaults:
    """The faults of one emulator's pod network (see the module docstring)."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet
        self._timers: list[threading.Timer] = []
        self._seen: dict[str, str] = {}  # pod uid -> the annotation value acted on
        self._lock = threading.Lock()
        self._dropped: list[tuple[str, str]] = []  # (pod uid, the peer address it cannot reach)

    def _worker(self, pod: Obj | str, namespace: str = "default") -> PodWorker:
        if isinstance(pod, str):
            pod = self.kubelet.api.get(PODS, namespace, pod)
        worker = self.kubelet.worker(pod)
        if worker is None or worker.netns is None or self.kubelet.podnet is None:
            name = pod["metadata"]["name"]
            raise ValueError(f"pod {name} is not running on the pod network")
        return worker

    def link_down(
        self, pod: Obj | str, seconds: float | None = None, namespace: str = "default"
    ) -> None:
        """Take the pod's ``eth0`` down, for ``seconds`` (None: for good)."""
        worker = self._worker(pod, namespace)
        podnet = self.kubelet.podnet
        assert podnet is not None
        podnet.set_link(worker.uid, up=False)
        if seconds is not None:
            timer = threading.Timer(seconds, self._up, args=(worker.uid,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _up(self, uid: str) -> None:
        podnet = self.kubelet.podnet
        if podnet is not None and podnet.namespace(uid) is not None:
            podnet.set_link(uid, up=True)

    def drop_between(self, a: Obj | str, b: Obj | str, namespace: str = "default") -> None:
        """Drop every packet between pods ``a`` and ``b`` (both ways, silently)."""
        first, second = self._worker(a, namespace), self._worker(b, namespace)
        for worker, peer in ((first, second), (second, first)):
            # the peer's address bound to a MAC no pod has: frames leave and are never taken in
            _ip(
                worker.netns,
                "neigh",
                "replace",
                peer.address,
                "lladdr",
                BLACKHOLE_MAC,
                "nud",
                "permanent",
                "dev",
                "eth0",
            )
            self._dropped.append((worker.uid, peer.address))

    def hide_service(self, name: str, namespace: str = "default") -> None:
        """Make Service ``name`` resolve to nothing in every pod."""
        hosts = self.kubelet.hosts
        if hosts is None:
            raise ValueError("no pod network: names are rewritten, not resolved")
        hosts.hidden.add((namespace, name))
        hosts.refresh()

    def kill_node(self, pod: Obj | str, namespace: str = "default") -> None:
        """The pod's node dies: its link goes down and every process of the pod is killed."""
        worker = self._worker(pod, namespace)
        podnet = self.kubelet.podnet
        assert podnet is not None
        podnet.set_link(worker.uid, up=False)
        procs.signal_all(worker.marker, None, signal.SIGKILL)

    def heal(self) -> None:
        """Undo every fault: links up, drops gone, every Service resolving again."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        podnet, hosts = self.kubelet.podnet, self.kubelet.hosts
        for worker in self.kubelet.workers():
            if podnet is not None and worker.netns is not None and worker.attached:
                podnet.set_link(worker.uid, up=True)
        for uid, address in self._dropped:
            name = podnet.namespace(uid) if podnet is not None else None
            if name is not None:
                subprocess.run(
                    ["ip", "-n", name, "neigh", "del", address, "dev", "eth0"],
                    capture_output=True,
                    timeout=30,
                )
        self._dropped.clear()
        if hosts is not None:
            hosts.hidden.clear()
            hosts.refresh()

    def from_annotation(self, pod: Obj) -> None:
        """Act on the pod's fault annotation once per value (called when the pod changes)."""
        value = (pod["metadata"].get("annotations") or {}).get(ANNOTATION)
        uid = pod["metadata"]["uid"]
        with self._lock:
            if not value or self._seen.get(uid) == value:
                return
            self._seen[uid] = value
        kind, _, argument = value.partition(":")
        if kind == "link-down":
            self.link_down(pod, float(argument) if argument else None)
        elif kind == "drop":
            self.drop_between(pod, argument, pod["metadata"]["namespace"])
        elif kind == "kill-node":
            self.kill_node(pod)


def _ip(netns: str | None, *args: str) -> None:
    assert netns is not None
    name = netns.rsplit("/", 1)[1]
    subprocess.run(["ip", "-n", name, *args], check=True, capture_output=True, timeout=30)
