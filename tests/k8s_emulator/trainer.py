"""Kubeflow Trainer v2 (v2.3.0): TrainJob -> JobSet -> Job -> Pods, with the torch plugin and Kueue.

What the controller does, as the real ``trainjob_controller`` with the
``jobset`` and ``torch`` plugins and JobSet's controller do it:

* ``spec.runtimeRef``: a ``ClusterTrainingRuntime`` (default kind) or a
  ``TrainingRuntime`` in the job's namespace; a missing one is a
  ``Warning`` event and nothing is created.
* The runtime's JobSet template, with ``spec.trainer`` merged into the
  ``node`` container (image, command, args, env, ``resourcesPerNode``) and
  every ``runtimePatches[].trainingRuntimeSpec`` applied (JobSet and pod
  template labels/annotations, pod ``volumes``, ``nodeSelector``,
  ``tolerations``, ``affinity``, ``serviceAccountName``,
  ``imagePullSecrets``, ``terminationGracePeriodSeconds``, container
  ``env``/``volumeMounts`` by name).
* A JobSet named as the TrainJob (owned by it), a headless Service of the
  same name, and for the ``node`` replicated job one Indexed Job
  ``NAME-node-0`` with ``numNodes`` completions whose pods
  ``NAME-node-0-I-xxxxx`` carry JobSet's labels and hostname
  ``NAME-node-0-I`` in subdomain ``NAME``.
* The torch plugin's environment in the ``node`` container: ``PET_NNODES``,
  ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (from the pod's
  ``batch.kubernetes.io/job-completion-index`` annotation),
  ``PET_MASTER_ADDR=NAME-node-0-0.NAME`` and ``PET_MASTER_PORT=29500``.
* Status: a pod that fails more often than the Job's ``backoffLimit``
  (default 6) fails the Job, the JobSet (``FailedJobs``) and the TrainJob;
  every pod succeeded completes them (``AllJobsCompleted``). ``jobsStatus``
  mirrors JobSet's ``replicatedJobsStatus``. ``spec.suspend`` deletes the
  pods and sets ``Suspended`` (reason ``Suspended``; ``Resumed`` when lifted).
* Kueue: a suspended TrainJob labelled ``kueue.x-k8s.io/queue-name`` is
  admitted (``suspend: false``) after :attr:`Kueue.delay` seconds unless
  its queue is full; :meth:`Kueue.preempt` suspends an admitted one again.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from pathlib import Path

from .apiserver import ApiError, ApiServer
from .meta import Obj, deep, now
from .resources import PODS, SERVICES, Resource
from .store import DELETED, Event

log = logging.getLogger(__name__)

GROUP = "trainer.kubeflow.org"
LABEL_JOBSET = "jobset.sigs.k8s.io/jobset-name"
LABEL_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
LABEL_COMPLETION = "batch.kubernetes.io/job-completion-index"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
NODE = "node"
TRAINER_PORT = 29500
DEFAULT_BACKOFF = 6

JOBSETS = Resource(
    "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset", "JobSet", subresources=("status",)
)
JOBS = Resource("batch", "v1", "jobs", "job", "Job", subresources=("status",))


class Kueue:
    """Admission of suspended TrainJobs by queue (what a test sets up)."""

    def __init__(self) -> None:
        self.delay = 0.5
        self.full: set[str] = set()
        self._preempted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def admit_after(self, seconds: float) -> None:
        """Admit queued jobs ``seconds`` after they were created."""
        self.delay = seconds

    def set_full(self, queue_name: str, full: bool = True) -> None:
        """A full queue admits nothing until it is set free again."""
        with self._lock:
            (self.full.add if full else self.full.discard)(queue_name)

    def preempt(self, name: str, namespace: str = "default") -> None:
        """Suspend an admitted job again (the controller applies it at its next look)."""
        with self._lock:
            self._preempted.add((namespace, name))

    def take_preempted(self, namespace: str, name: str) -> bool:
        with self._lock:
            if (namespace, name) in self._preempted:
                self._preempted.discard((namespace, name))
                return True
            return False


def _cond(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def _set(status: Obj, kind: str, value: str, reason: str, message: str) -> None:
    found = _cond(status, kind)
    if found is not None and (found["status"], found["reason"]) == (value, reason):
        return
    entry = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }
    status["conditions"] = [c for c in status.get("conditions", []) if c["type"] != kind]
    status["conditions"].append(entry)


def _true(status: Obj, kind: str) -> bool:
    found = _cond(status, kind)
    return found is not None and found.get("status") == "True"


def _owner(obj: Obj) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _merge_named(into: list[Obj], extra: list[Obj]) -> list[Obj]:
    names = {e.get("name") for e in extra}
    return [*[i for i in into if i.get("name") not in names], *deep(extra)]


def apply_patch(job: Obj, pod: Obj, patch: Obj, rjob: str) -> None:
    """Apply one ``trainingRuntimeSpec`` patch to a JobSet's ``job`` and pod template ``pod``."""
    template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    for key in ("labels", "annotations"):
        if meta.get(key):
            job.setdefault("metadata", {}).setdefault(key, {}).update(meta[key])
    for rj in (template.get("spec") or {}).get("replicatedJobs") or []:
        if rj.get("name") != rjob:
            continue
        pod_patch = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
        for key in ("labels", "annotations"):
            values = (pod_patch.get("metadata") or {}).get(key)
            if values:
                pod.setdefault("metadata", {}).setdefault(key, {}).update(values)
        spec = pod_patch.get("spec") or {}
        target = pod.setdefault("spec", {})
        if spec.get("volumes"):
            target["volumes"] = _merge_named(target.get("volumes", []), spec["volumes"])
        for key in ("nodeSelector",):
            if spec.get(key):
                target.setdefault(key, {}).update(spec[key])
        for key in ("tolerations", "imagePullSecrets", "schedulingGates"):
            if spec.get(key):
                target[key] = [*target.get(key, []), *deep(spec[key])]
        for key in (
            "serviceAccountName",
            "terminationGracePeriodSeconds",
            "affinity",
            "securityContext",
        ):
            if key in spec:
                target[key] = deep(spec[key])
        for kind in ("containers", "initContainers"):
            for change in spec.get(kind) or []:
                for container in target.get(kind, []):
                    if container.get("name") == change.get("name"):
                        for key in ("env", "volumeMounts"):
                            if change.get(key):
                                container[key] = _merge_named(container.get(key, []), change[key])
                        if "securityContext" in change:
                            container["securityContext"] = deep(change["securityContext"])


class TrainerController:
    """Reconciles TrainJobs on a thread of its own (see the module docstring)."""

    def __init__(
        self, api: ApiServer, resources: dict[str, Resource], kueue: Kueue, tick: float = 0.2
    ) -> None:
        self.api = api
        self.trainjobs = resources["TrainJob"]
        self.runtimes = resources["TrainingRuntime"]
        self.cluster_runtimes = resources["ClusterTrainingRuntime"]
        self.kueue = kueue
        self._tick = tick
        self._created: dict[tuple[str, str], float] = {}
        #: The pod template and node count of each TrainJob's JobSet (built once).
        self._templates: dict[tuple[str, str], tuple[Obj, int]] = {}
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._unsubscribe = api.store.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._loop, name="trainer-controller", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._unsubscribe()
        self._closed.set()
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _enqueue(self, namespace: str, name: str) -> None:
        with self._lock:
            if (namespace, name) in self._pending:
                return
            self._pending.add((namespace, name))
        self._queue.put((namespace, name))

    def _on_event(self, event: Event) -> None:
        meta = event.obj["metadata"]
        if event.resource == self.trainjobs.key:
            if event.type != DELETED:
                self._enqueue(meta["namespace"], meta["name"])
            return
        if event.resource in (PODS.key, JOBS.key, JOBSETS.key):
            owner = (meta.get("labels") or {}).get(LABEL_JOBSET)
            if owner:
                self._enqueue(meta["namespace"], owner)

    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                item = self._queue.get(timeout=self._tick)
            except queue.Empty:
                for job in self.api.store.objects(self.trainjobs.key)[0]:
                    spec = job.get("spec") or {}
                    queued = LABEL_QUEUE in (job["metadata"].get("labels") or {})
                    if queued or spec.get("suspend") or spec.get("activeDeadlineSeconds"):
                        self._enqueue(job["metadata"]["namespace"], job["metadata"]["name"])
                continue
            if item is None:
                return
            with self._lock:
                self._pending.discard(item)
            try:
                self.reconcile(*item)
            except ApiError as exc:
                log.debug("reconcile %s/%s: %s", item[0], item[1], exc.message)
            except Exception:
                log.exception("reconcile TrainJob %s/%s failed", *item)

    # --- reconcile -----------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> None:
        job = self.api.store.get(self.trainjobs.key, namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        self._created.setdefault((namespace, name), time.monotonic())
        spec, old = job.get("spec") or {}, job.get("status") or {}
        status = deep(old)
        if _true(status, "Complete") or _true(status, "Failed"):
            return
        if self._kueue(job, spec):
            return
        jobset = self.api.store.get(JOBSETS.key, namespace, name)
        pods = [
            p
            for p in self.api.store.objects(PODS.key, namespace)[0]
            if (p["metadata"].get("labels") or {}).get(LABEL_JOBSET) == name
        ]
        if spec.get("suspend"):
            for pod in pods:
                self._delete(PODS, pod)
            if not _true(status, "Suspended"):
                _set(status, "Suspended", "True", "Suspended", "TrainJob is suspended")
            status["jobsStatus"] = [
                {"name": NODE, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 1}
            ]
            self._write(job, old, status)
            return
        if _true(status, "Suspended"):
            _set(status, "Suspended", "False", "Resumed", "TrainJob is resumed")
        key = (namespace, name)
        if jobset is None or key not in self._templates:
            built = self._build(job, spec)
            if built is None:
                return
            jobset = built
        self._pods(job, jobset, pods)
        pods = [
            p
            for p in self.api.store.objects(PODS.key, namespace)[0]
            if (p["metadata"].get("labels") or {}).get(LABEL_JOBSET) == name
        ]
        self._status(job, spec, jobset, pods, status)
        self._write(job, old, status)

    def _kueue(self, job: Obj, spec: Obj) -> bool:
        """Kueue's admission and preemption; True when it changed the job (look again later)."""
        meta = job["metadata"]
        queue_name = (meta.get("labels") or {}).get(LABEL_QUEUE)
        if queue_name is None:
            return False
        key = (meta["namespace"], meta["name"])
        if not spec.get("suspend") and self.kueue.take_preempted(*key):
            self._set_suspend(job, True)
            return True
        if spec.get("suspend") and queue_name not in self.kueue.full:
            if time.monotonic() - self._created[key] >= self.kueue.delay:
                self._set_suspend(job, False)
                return True
        return False

    def _set_suspend(self, job: Obj, value: bool) -> None:
        meta = job["metadata"]
        self.api.mutate(
            self.trainjobs,
            meta["namespace"],
            meta["name"],
            lambda o: o.setdefault("spec", {}).__setitem__("suspend", value),
        )

    def _runtime(self, job: Obj, spec: Obj) -> Obj | None:
        ref = spec.get("runtimeRef") or {}
        if ref.get("kind") == "TrainingRuntime":
            return self.api.store.get(self.runtimes.key, job["metadata"]["namespace"], ref["name"])
        return self.api.store.get(self.cluster_runtimes.key, "", ref.get("name", ""))

    def _build(self, job: Obj, spec: Obj) -> Obj | None:
        """The JobSet (and its headless Service) for ``job``; None without its runtime."""
        meta = job["metadata"]
        runtime = self._runtime(job, spec)
        if runtime is None:
            ref = spec.get("runtimeRef") or {}
            self.api.record_event(
                job,
                "Warning",
                "TrainJobResourcesCreationFailed",
                f"{ref.get('kind', 'ClusterTrainingRuntime')}.trainer.kubeflow.org "
                f'"{ref.get("name")}" not found',
                "trainjob-controller",
            )
            return None
        template = deep((runtime.get("spec") or {}).get("template") or {})
        jobset: Obj = {
            "apiVersion": JOBSETS.api_version,
            "kind": "JobSet",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                "ownerReferences": [_owner(job)],
            },
            "spec": template.get("spec") or {},
        }
        policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
        self._templates[(meta["namespace"], meta["name"])] = self._pod_template(
            job, spec, jobset, int(policy.get("numNodes") or 1)
        )
        try:
            self.api.create(JOBSETS, meta["namespace"], jobset)
        except ApiError as exc:
            if exc.code != 409:
                raise
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": {LABEL_JOBSET: meta["name"]},
                "ownerReferences": [_owner(job)],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {LABEL_JOBSET: meta["name"]},
                "ports": [{"port": TRAINER_PORT}],
            },
        }
        try:
            self.api.create(SERVICES, meta["namespace"], service)
        except ApiError:
            pass
        return self.api.store.get(JOBSETS.key, meta["namespace"], meta["name"])

    def _pod_template(
        self, job: Obj, spec: Obj, jobset: Obj, default_nodes: int
    ) -> tuple[Obj, int]:
        rjobs = jobset["spec"].get("replicatedJobs") or []
        rjob = next((r for r in rjobs if r.get("name") == NODE), rjobs[0] if rjobs else {})
        job_template = deep(rjob.get("template") or {})
        pod = deep((job_template.get("spec") or {}).get("template") or {})
        pod.setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
        for patch in spec.get("runtimePatches") or []:
            apply_patch(jobset, pod, patch, NODE)
        trainer = spec.get("trainer") or {}
        nodes = int(trainer.get("numNodes") or default_nodes)
        nproc = trainer.get("numProcPerNode", "auto")
        name = job["metadata"]["name"]
        for container in pod["spec"].get("containers", []):
            if container.get("name") != NODE:
                continue
            for key in ("image", "command", "args"):
                if trainer.get(key):
                    container[key] = deep(trainer[key])
            if trainer.get("resourcesPerNode"):
                container["resources"] = deep(trainer["resourcesPerNode"])
            completion = f"metadata.annotations['{LABEL_COMPLETION}']"
            pet = [
                {"name": "PET_NNODES", "value": str(nodes)},
                {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": completion}}},
                {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
                {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
            ]
            container["env"] = _merge_named(
                _merge_named(container.get("env", []), trainer.get("env") or []), pet
            )
            ports = container.setdefault("ports", [])
            if not any(p.get("containerPort") == TRAINER_PORT for p in ports):
                ports.append({"containerPort": TRAINER_PORT, "protocol": "TCP"})
        return pod, nodes

    def _pods(self, job: Obj, jobset: Obj, pods: list[Obj]) -> None:
        """The Job of the ``node`` replicated job and its missing pods (one per index)."""
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        template, nodes = self._templates[(namespace, name)]
        job_name = f"{name}-{NODE}-0"
        batch = self.api.store.get(JOBS.key, namespace, job_name)
        if batch is None:
            batch = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": job_name,
                    "namespace": namespace,
                    "labels": {
                        LABEL_JOBSET: name,
                        LABEL_RJOB: NODE,
                        LABEL_JOB_INDEX: "0",
                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
                    },
                    "ownerReferences": [_owner(jobset)],
                },
                "spec": {
                    "completions": nodes,
                    "parallelism": nodes,
                    "completionMode": "Indexed",
                    "backoffLimit": DEFAULT_BACKOFF,
                },
            }
            try:
                self.api.create(JOBS, namespace, batch)
            except ApiError as exc:
                if exc.code != 409:
                    raise
            batch = self.api.store.get(JOBS.key, namespace, job_name) or batch
        have = {
            (p["metadata"].get("labels") or {}).get(LABEL_COMPLETION)
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
        }
        for index in range(nodes):
            if str(index) in have:
                continue
            pod = deep(template)
            labels = {
                **(pod.get("metadata") or {}).get("labels", {}),
                LABEL_JOBSET: name,
                LABEL_RJOB: NODE,
                LABEL_JOB_INDEX: "0",
                LABEL_COMPLETION: str(index),
                LABEL_JOB_NAME: job_name,
                "job-name": job_name,
            }
            annotations = {
                **(pod.get("metadata") or {}).get("annotations", {}),
                LABEL_COMPLETION: str(index),
            }
            pod["metadata"] = {
                "name": f"{job_name}-{index}-{secrets.token_hex(3)[:5]}",
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [_owner(batch)],
            }
            pod["spec"]["hostname"] = f"{job_name}-{index}"
            pod["spec"]["subdomain"] = name
            pod.update(apiVersion="v1", kind="Pod")
            try:
                self.api.create(PODS, namespace, pod)
            except ApiError:
                continue

    def _status(self, job: Obj, spec: Obj, jobset: Obj, pods: list[Obj], status: Obj) -> None:
        nodes = self._templates[(job["metadata"]["namespace"], job["metadata"]["name"])][1]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        phases = [str((p.get("status") or {}).get("phase", "Pending")) for p in live]
        restarts = max(
            (
                int(c.get("restartCount", 0))
                for p in live
                for c in (p.get("status") or {}).get("containerStatuses", [])
            ),
            default=0,
        )
        failed = phases.count("Failed") > DEFAULT_BACKOFF or restarts > DEFAULT_BACKOFF
        failed = failed or (
            "Failed" in phases and live and live[0]["spec"].get("restartPolicy") == "Never"
        )
        succeeded = phases.count("Succeeded") >= nodes
        ready = all(p == "Running" for p in phases) and len(phases) >= nodes
        js_status: Obj = {
            "replicatedJobsStatus": [
                {
                    "name": NODE,
                    "ready": int(ready),
                    "succeeded": int(succeeded),
                    "failed": int(failed),
                    "active": int(not succeeded and not failed),
                    "suspended": 0,
                }
            ]
        }
        if succeeded:
            _set(
                js_status, "Completed", "True", "AllJobsCompleted", "jobset completed successfully"
            )
        elif failed:
            _set(
                js_status,
                "Failed",
                "True",
                "FailedJobs",
                "jobset failed due to one or more job failures",
            )
        meta = job["metadata"]
        self.api.mutate(
            JOBSETS, meta["namespace"], meta["name"], lambda o: o.__setitem__("status", js_status)
        )
        for kind, theirs in (("Complete", "Completed"), ("Failed", "Failed")):
            found = _cond(js_status, theirs)
            if found is not None:
                _set(status, kind, "True", found["reason"], found["message"])
        status["jobsStatus"] = [dict(js_status["replicatedJobsStatus"][0])]
        deadline = spec.get("activeDeadlineSeconds")
        started = self._created[(meta["namespace"], meta["name"])]
        if deadline and not succeeded and time.monotonic() - started >= int(deadline):
            _set(
                status,
                "Failed",
                "True",
                "DeadlineExceeded",
                "TrainJob exceeded its active deadline",
            )
        if _true(status, "Failed") or _true(status, "Complete"):
            for pod in live:
                if str((pod.get("status") or {}).get("phase")) in ("Running", "Pending"):
                    self._delete(PODS, pod)

    def _delete(self, resource: Resource, obj: Obj) -> None:
        try:
            self.api.delete(resource, obj["metadata"]["namespace"], obj["metadata"]["name"])
        except ApiError:
            pass

    def _write(self, job: Obj, old: Obj, status: Obj) -> None:
        if status != old:
            meta = job["metadata"]
            self.api.mutate(
                self.trainjobs,
                meta["namespace"],
                meta["name"],
                lambda o: o.__setitem__("status", status),
            )


#: Trainer v2.3.0's CRD files (in ``../shared/k8s-crds``).
TRAINER_CRDS = (
    "trainer.kubeflow.org_trainjobs.yaml",
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
)


def default_runtime() -> Obj:
    """The ``torch-distributed`` ClusterTrainingRuntime of Trainer v2.3.0's manifests."""
    import yaml

    from ..crd_schema import CRD_DIR

    text = (Path(CRD_DIR) / "torch_distributed.clustertrainingruntime.yaml").read_text()
    return dict(yaml.safe_load(text))
