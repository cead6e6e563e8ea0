"""Kueue's TrainJob integration, played without Kueue's own objects (no Workloads, no queues).

What a TrainJob sees when Kueue manages it (a ``kueue.x-k8s.io/queue-name``
label):

* Its webhook suspends the TrainJob on create and adds an empty runtime patch
  of the manager ``kueue.x-k8s.io/manager``.
* Admission, after :meth:`Kueue.admit_after` seconds unless the queue is full
  (:meth:`Kueue.set_full`): that patch gets, for each replicated job, the pod
  labels ``kueue.x-k8s.io/podset: <name>``, ``kueue.x-k8s.io/local-queue-name``
  and ``kueue.x-k8s.io/cluster-queue-name``, and ``suspend`` becomes false in
  the same update; Events ``CreatedWorkload`` and ``Started`` (``Admitted by
  clusterQueue <cq>``).
* Preemption (:meth:`Kueue.preempt`): ``suspend: true``; once the JobSet has no
  active Job, the patch is emptied again and the Event ``Stopped`` says why. The
  workload then waits in its queue like any other (admitted again after the
  delay unless the queue is full).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable

from .apiserver import ApiServer
from .loop import ControlLoop, Key
from .meta import ApiError, Obj, deep
from .resources import JOBSETS, Resource
from .store import DELETED, Event

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PODSET_LABEL = "kueue.x-k8s.io/podset"
#: Pod labels of an admitted workload (Kueue's AssignQueueLabelsForPods, on by default).
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
MANAGER = "kueue.x-k8s.io/manager"
COMPONENT = "kueue-job-controller"
DEFAULT_CLUSTER_QUEUE = "cluster-queue"


def _queue(trainjob: Obj) -> str:
    return str((trainjob["metadata"].get("labels") or {}).get(QUEUE_LABEL) or "")


def _finished(trainjob: Obj) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (trainjob.get("status") or {}).get("conditions", [])
    )


def workload_name(trainjob: Obj) -> str:
    """Kueue's Workload name for a TrainJob: ``trainjob-<name>-<hash>``."""
    meta = trainjob["metadata"]
    digest = hashlib.sha1(
        f"TrainJob\ntrainer.kubeflow.org\n{meta['name']}\n{meta.get('uid', '')}".encode()
    ).hexdigest()
    return f"trainjob-{meta['name'][:245]}-{digest[:5]}"


class Kueue:
    """Test control of the emulated Kueue (``emu.kueue``); safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._delay = 0.0
        self._delays: dict[str, float] = {}
        self._full: set[str] = set()
        self._cluster_queues: dict[str, str] = {}
        self._controller: KueueController | None = None

    # --- the control API -----------------------------------------------------------------

    def admit_after(self, seconds: float, queue: str | None = None) -> None:
        """Admit a pending TrainJob ``seconds`` after it starts waiting (default 0), in every
        queue or in ``queue`` (the LocalQueue name of the label)."""
        with self._lock:
            if queue is None:
                self._delay = seconds
            else:
                self._delays[queue] = seconds
        self._poke()

    def set_full(self, queue: str, full: bool = True) -> None:
        """A full queue admits nothing (its TrainJobs stay suspended) until set not full."""
        with self._lock:
            if full:
                self._full.add(queue)
            else:
                self._full.discard(queue)
        self._poke()

    def set_cluster_queue(self, queue: str, cluster_queue: str) -> None:
        """The ClusterQueue the LocalQueue ``queue`` points at (named in Events)."""
        with self._lock:
            self._cluster_queues[queue] = cluster_queue

    def preempt(self, name: str, namespace: str = "default", message: str | None = None) -> None:
        """Evict an admitted TrainJob as a preemption does: suspended again, its pods deleted,
        back in its queue (readmitted after the delay unless the queue is full)."""
        controller = self._controller
        if controller is None:
            raise RuntimeError("Kueue runs only on an emulator serving Kubeflow Trainer v2")
        controller.preempt((namespace, name), message)

    def admitted(self, name: str, namespace: str = "default") -> bool:
        """Whether Kueue has admitted the TrainJob (and not evicted it since)."""
        controller = self._controller
        return controller is not None and (namespace, name) in controller.admitted

    # --- settings read by the controller -------------------------------------------------

    def delay(self, queue: str) -> float:
        with self._lock:
            return self._delays.get(queue, self._delay)

    def full(self, queue: str) -> bool:
        with self._lock:
            return queue in self._full

    def cluster_queue(self, queue: str) -> str:
        with self._lock:
            return self._cluster_queues.get(queue, DEFAULT_CLUSTER_QUEUE)

    def _poke(self) -> None:
        if self._controller is not None:
            self._controller.wake()

    def start(self, api: ApiServer, trainjobs: Resource) -> None:
        """Install the webhook and start the controller (the emulator does it)."""
        api.mutating.setdefault(trainjobs.key, []).insert(0, suspend_on_create)
        self._controller = KueueController(api, trainjobs, self)

    def close(self) -> None:
        if self._controller is not None:
            self._controller.close()


def suspend_on_create(operation: str, trainjob: Obj, old: Obj | None) -> None:
    """Kueue's TrainJob webhook: a new TrainJob with a queue waits suspended for admission."""
    if operation != "CREATE" or not _queue(trainjob):
        return
    spec = trainjob.setdefault("spec", {})
    spec["suspend"] = True
    patches = spec.setdefault("runtimePatches", [])
    if not any(p.get("manager") == MANAGER for p in patches):
        patches.append({"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}})


class KueueController(ControlLoop):
    """Admits and evicts the TrainJobs of Kueue's queues."""

    name = "kueue"

    def __init__(self, api: ApiServer, trainjobs: Resource, settings: Kueue) -> None:
        self.trainjobs = trainjobs
        self.settings = settings
        #: When each pending TrainJob started waiting (monotonic seconds).
        self.pending: dict[Key, float] = {}
        self.admitted: set[Key] = set()
        #: TrainJobs being stopped (preempted), with the Event message.
        self.stopping: dict[Key, str] = {}
        self._seen: set[str] = set()
        super().__init__(api)

    def keys_for(self, event: Event) -> list[Key]:
        if event.resource == self.trainjobs.key and _queue(event.obj):
            key = (event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])
            if event.type == DELETED:
                self.pending.pop(key, None)
                self.admitted.discard(key)
                self.stopping.pop(key, None)
                return []
            return [key]
        if event.resource == JOBSETS.key:
            key = (event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])
            return [key] if key in self.stopping else []
        return []

    def wake(self) -> None:
        for key in list(self.pending):
            self.enqueue(key)

    def preempt(self, key: Key, message: str | None) -> None:
        if key not in self.admitted:
            raise ValueError(f"TrainJob {key[0]}/{key[1]} is not admitted by Kueue")
        trainjob = self.api.store.get(self.trainjobs.key, *key)
        if trainjob is None:
            raise ValueError(f"TrainJob {key[0]}/{key[1]} not found")
        queue = self.settings.cluster_queue(_queue(trainjob))
        self.admitted.discard(key)
        self.stopping[key] = message or (
            f"Preempted to accommodate a workload (UID: {uuid.uuid4()}, JobUID: {uuid.uuid4()}) "
            f"due to prioritization in the ClusterQueue; preemptor path: /{queue}; "
            f"preemptee path: /{queue}"
        )

        def suspend(tj: Obj) -> None:
            tj["spec"]["suspend"] = True

        self._update(key, suspend)
        self.enqueue(key)

    # --- reconcile -----------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        trainjob = self.api.store.get(self.trainjobs.key, *key)
        if trainjob is None:
            return None
        queue = _queue(trainjob)
        uid = trainjob["metadata"]["uid"]
        if uid not in self._seen:
            self._seen.add(uid)
            self.api.record_event(
                trainjob,
                "Normal",
                "CreatedWorkload",
                f"Created Workload: {key[0]}/{workload_name(trainjob)}",
                COMPONENT,
            )
        if _finished(trainjob):
            self.pending.pop(key, None)
            return None
        if key in self.stopping:
            return self._stop(key, trainjob)
        if not trainjob.get("spec", {}).get("suspend"):
            return None
        if key in self.admitted:
            # Suspended by someone else: Kueue lets the workload wait again.
            self.admitted.discard(key)
        self.pending.setdefault(key, time.monotonic())
        if self.settings.full(queue):
            return None
        due = self.pending[key] + self.settings.delay(queue) - time.monotonic()
        if due > 0:
            return due
        self._admit(key, trainjob)
        return None

    def _podsets(self, trainjob: Obj) -> list[str]:
        meta = trainjob["metadata"]
        jobset = self.api.store.get(JOBSETS.key, meta["namespace"], meta["name"])
        if jobset is None:
            return []
        return [r["name"] for r in jobset["spec"].get("replicatedJobs", [])]

    def _admit(self, key: Key, trainjob: Obj) -> None:
        podsets = self._podsets(trainjob)
        if not podsets:
            self.enqueue(key, 0.1)  # the TrainJob's JobSet is not there yet
            return
        queue = _queue(trainjob)
        cluster_queue = self.settings.cluster_queue(queue)
        labels = {CLUSTER_QUEUE_LABEL: cluster_queue, LOCAL_QUEUE_LABEL: queue}
        patches = [
            {
                "name": name,
                "template": {
                    "spec": {
                        "template": {
                            "metadata": {"labels": {**labels, PODSET_LABEL: name}},
                            "spec": {},
                        }
                    }
                },
            }
            for name in podsets
        ]

        def admit(tj: Obj) -> None:
            for patch in tj["spec"].setdefault("runtimePatches", []):
                if patch.get("manager") == MANAGER:
                    template = patch.setdefault("trainingRuntimeSpec", {}).setdefault(
                        "template", {}
                    )
                    template.setdefault("spec", {})["replicatedJobs"] = deep(patches)
            tj["spec"]["suspend"] = False

        if not self._update(key, admit):
            return
        self.pending.pop(key, None)
        self.admitted.add(key)
        current = self.api.store.get(self.trainjobs.key, *key) or trainjob
        self.api.record_event(
            current, "Normal", "Started", f"Admitted by clusterQueue {cluster_queue}", COMPONENT
        )

    def _stop(self, key: Key, trainjob: Obj) -> float | None:
        """Kueue's ``Stop``: wait for the JobSet to have no active Job, then clear the patch."""
        meta = trainjob["metadata"]
        jobset = self.api.store.get(JOBSETS.key, meta["namespace"], meta["name"])
        statuses = ((jobset or {}).get("status") or {}).get("replicatedJobsStatus", [])
        if any(s.get("active", 0) > 0 for s in statuses):
            return 0.2

        def restore(tj: Obj) -> None:
            for patch in tj["spec"].get("runtimePatches", []):
                if patch.get("manager") == MANAGER:
                    template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
                    (template.get("spec") or {}).pop("replicatedJobs", None)

        if not self._update(key, restore):
            return 0.2
        message = self.stopping.pop(key)
        self.api.record_event(trainjob, "Normal", "Stopped", message, COMPONENT)
        self.pending[key] = time.monotonic()
        return 0.0

    def _update(self, key: Key, change: Callable[[Obj], None]) -> bool:
        """Update the TrainJob through the API (its webhooks run); False if refused."""
        trainjob = self.api.store.get(self.trainjobs.key, *key)
        if trainjob is None:
            return False
        updated = deep(trainjob)
        change(updated)
        updated["metadata"].pop("resourceVersion", None)
        try:
            self.api.replace(self.trainjobs, key[0], key[1], updated)
        except ApiError:
            return False
        return True
