"""``batch/v1`` Jobs: the API server's defaults and the Job controller (kube-controller-manager).

What JobSet's child Jobs need, as Kubernetes 1.31 does it:

* Defaults on create: ``parallelism``/``completions`` 1, ``backoffLimit`` 6,
  ``completionMode: NonIndexed``, ``suspend: false``,
  ``podReplacementPolicy: TerminatingOrFailed``, the selector on the
  generated ``batch.kubernetes.io/controller-uid`` label and the template
  labels ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name``,
  ``controller-uid``, ``job-name``; ``restartPolicy`` must be ``OnFailure`` or
  ``Never`` (422).
* Pods: ``<job>-<index>-<random>`` for ``Indexed`` Jobs (annotation and label
  ``batch.kubernetes.io/job-completion-index``, ``hostname <job>-<index>``,
  ``JOB_COMPLETION_INDEX`` from the annotation), ``<job>-<random>`` otherwise;
  at most ``parallelism`` active; the ``batch.kubernetes.io/job-tracking``
  finalizer, removed once a finished pod is counted (also from the pods of a
  Job that is gone).
* Failure: ``backoffLimit`` counts failed pods (``restartPolicy: Never``; a
  failed index is replaced after a short back-off) and, under ``OnFailure``,
  the container restarts of the running pods; ``activeDeadlineSeconds``.
  ``FailureTarget`` then, once no pod is left running, ``Failed``
  (``BackoffLimitExceeded``, ``DeadlineExceeded``). Success:
  ``SuccessCriteriaMet`` then ``Complete`` (``CompletionsReached``).
* ``suspend``: active pods deleted, ``Suspended`` (``JobSuspended`` /
  ``JobResumed``), and pods made again on resume.
* Status: ``active``, ``ready``, ``terminating``, ``succeeded``, ``failed``,
  ``completedIndexes``, ``uncountedTerminatedPods``, ``startTime``,
  ``completionTime`` (on success only), ``conditions``; Events ``SuccessfulCreate``,
  ``SuccessfulDelete``, ``Completed``, ``BackoffLimitExceeded``,
  ``Suspended``, ``Resumed``.
"""

from __future__ import annotations

import time

from .apiserver import ApiServer
from .loop import ControlLoop, Key, controller_of, owner_ref
from .meta import ApiError, Obj, deep, new_uid, now, parse_time
from .resources import JOBS, PODS
from .store import Event

COMPONENT = "job-controller"
LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID = "controller-uid"
LEGACY_JOB_NAME = "job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
DEFAULT_BACKOFF_LIMIT = 6

BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


# --- API server: defaults and validation --------------------------------------------------------


def default_job(job: Obj) -> None:
    """What the API server fills in on create (``SetDefaults_Job`` and the selector)."""
    meta = job["metadata"]
    meta["uid"] = meta.get("uid") or new_uid()
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = (
            2**31 - 1 if spec.get("backoffLimitPerIndex") is not None else DEFAULT_BACKOFF_LIMIT
        )
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = (
            "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
        )
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    if not spec.get("manualSelector"):
        labels = template_meta.setdefault("labels", {})
        labels.update(
            {
                LABEL_CONTROLLER_UID: meta["uid"],
                LABEL_JOB_NAME: meta["name"],
                LEGACY_CONTROLLER_UID: meta["uid"],
                LEGACY_JOB_NAME: meta["name"],
            }
        )
        spec["selector"] = {"matchLabels": {LABEL_CONTROLLER_UID: meta["uid"]}}
    if not meta.get("labels") and template_meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])
    pod_spec = template.setdefault("spec", {})
    pod_spec.setdefault("dnsPolicy", "ClusterFirst")
    pod_spec.setdefault("schedulerName", "default-scheduler")
    pod_spec.setdefault("securityContext", {})
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in pod_spec.get("initContainers", []) + pod_spec.get("containers", []):
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")


def job_rules(job: Obj, old: Obj | None) -> list[Obj]:
    """The Job validation a controller relies on: the pods' ``restartPolicy``."""
    policy = job.get("spec", {}).get("template", {}).get("spec", {}).get("restartPolicy")
    field = "spec.template.spec.restartPolicy"
    if policy is None:
        message = 'Required value: valid values: "OnFailure", "Never"'
        return [{"reason": "FieldValueRequired", "message": message, "field": field}]
    if policy not in ("OnFailure", "Never"):
        message = f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"'
        return [{"reason": "FieldValueNotSupported", "message": message, "field": field}]
    return []


# --- helpers --------------------------------------------------------------------------------------


def condition(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    cond = condition(status, kind)
    return bool(cond and cond.get("status") == "True")


def job_finished(job: Obj) -> str | None:
    """``Complete`` or ``Failed`` when the Job has ended (what JobSet's ``JobFinished`` reads)."""
    status = job.get("status") or {}
    for kind in ("Complete", "Failed"):
        if is_true(status, kind):
            return kind
    return None


def _set_condition(status: Obj, kind: str, value: str, reason: str, message: str) -> bool:
    """The Job controller's condition update; True when something changed."""
    stamp = now()
    current = condition(status, kind)
    if current is not None:
        if (current["status"], current.get("reason"), current.get("message")) == (
            value,
            reason,
            message,
        ):
            return False
        if current["status"] != value:
            current["lastTransitionTime"] = stamp
        current.update(status=value, reason=reason, message=message, lastProbeTime=stamp)
        return True
    status.setdefault("conditions", []).append(
        {
            "type": kind,
            "status": value,
            "lastProbeTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }
    )
    return True


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "Pending"))


def _terminal(pod: Obj) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _active(pod: Obj) -> bool:
    return not _terminal(pod) and not _deleting(pod)


def _ready(pod: Obj) -> bool:
    cond = condition(pod.get("status") or {}, "Ready")
    return bool(cond and cond.get("status") == "True")


def _index(pod: Obj) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX, "")
    return int(value) if value.isdigit() else None


def _restarts(pod: Obj) -> int:
    status = pod.get("status") or {}
    statuses = status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def compress_indexes(indexes: set[int]) -> str:
    """``completedIndexes`` notation: ``0-2,5``."""
    out: list[str] = []
    for index in sorted(indexes):
        if out and "-" not in out[-1].split(",")[-1] and int(out[-1]) == index - 1:
            out[-1] = f"{out[-1]}-{index}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == index - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{index}"
        else:
            out.append(str(index))
    return ",".join(out)


def parse_indexes(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


# --- the controller -----------------------------------------------------------------------------


class JobController(ControlLoop):
    """kube-controller-manager's Job controller, for every ``batch/v1`` Job."""

    name = "job-controller"

    def __init__(self, api: ApiServer, backoff: float = 0.2) -> None:
        #: Pause before a failed index gets a new pod (Kubernetes: 10 s, doubling).
        self.backoff = backoff
        #: Pods this controller deleted (suspend, end of the Job): not counted as failures.
        self._deleted: set[str] = set()
        #: Last failure time of each (job uid, index), for the replacement back-off.
        self._failed_at: dict[tuple[str, int], float] = {}
        super().__init__(api)

    def keys_for(self, event: Event) -> list[Key]:
        meta = event.obj["metadata"]
        if event.resource == JOBS.key:
            return [(meta["namespace"], meta["name"])]
        if event.resource == PODS.key:
            ref = controller_of(event.obj, "Job")
            if ref is not None and ref.get("apiVersion") == "batch/v1":
                return [(meta["namespace"], ref["name"])]
        return []

    def resync(self) -> list[Key]:
        """Jobs with a deadline, and pods whose Job is gone but which keep its finalizer."""
        keys: list[Key] = []
        for job in self.api.store.objects(JOBS.key)[0]:
            if job.get("spec", {}).get("activeDeadlineSeconds") is not None:
                keys.append((job["metadata"]["namespace"], job["metadata"]["name"]))
        for pod in self.api.store.objects(PODS.key)[0]:
            if TRACKING_FINALIZER in pod["metadata"].get("finalizers", []):
                ref = controller_of(pod, "Job")
                if ref is not None:
                    keys.append((pod["metadata"]["namespace"], ref["name"]))
        return keys

    # --- reconcile -----------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        namespace, name = key
        job = self.api.store.get(JOBS.key, namespace, name)
        all_pods = [
            p
            for p in self.api.store.objects(PODS.key, namespace)[0]
            if (ref := controller_of(p, "Job")) is not None and ref["name"] == name
        ]
        uid = job["metadata"]["uid"] if job is not None else None
        pods = [p for p in all_pods if _ref_uid(p, uid) is not None]
        for orphan in (p for p in all_pods if _ref_uid(p, uid) is None):
            self._release(orphan)  # its Job is gone (or was replaced): nothing counts it
        if job is None:
            return None
        if job["metadata"].get("deletionTimestamp"):
            for pod in pods:
                if _terminal(pod) or _deleting(pod):
                    self._release(pod)
            return None
        return self._sync(job, pods)

    def _sync(self, job: Obj, pods: list[Obj]) -> float | None:
        spec = job["spec"]
        old = job.get("status") or {}
        status = deep(old)
        uid = job["metadata"]["uid"]
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        events: list[tuple[str, str, str]] = []
        finished = job_finished(job)

        # Count the finished pods once (the tracking finalizer), then let them go.
        succeeded_indexes = parse_indexes(status.get("completedIndexes", ""))
        new_failure = False
        for pod in pods:
            tracked = TRACKING_FINALIZER in pod["metadata"].get("finalizers", [])
            if not tracked:
                continue
            counted = _terminal(pod) or _deleting(pod)
            if not counted:
                continue
            if _phase(pod) == "Succeeded":
                index = _index(pod)
                if indexed and index is not None:
                    succeeded_indexes.add(index)
                else:
                    status["succeeded"] = status.get("succeeded", 0) + 1
            elif pod["metadata"]["uid"] not in self._deleted:
                status["failed"] = status.get("failed", 0) + 1
                new_failure = True
                index = _index(pod)
                self._failed_at[(uid, index if index is not None else -1)] = time.monotonic()
            self._release(pod)
        if indexed:
            status["succeeded"] = len(succeeded_indexes)
            if succeeded_indexes:
                status["completedIndexes"] = compress_indexes(succeeded_indexes)
        active = [p for p in pods if _active(p)]
        terminating = [p for p in pods if _deleting(p) and not _terminal(p)]
        requeue: float | None = None

        if finished is None and is_true(status, "FailureTarget"):
            self._delete_pods(job, active, events)
            if not terminating and not active:
                target = condition(status, "FailureTarget") or {}
                reason, message = target.get("reason", ""), target.get("message", "")
                _set_condition(status, "Failed", "True", reason, message)
                events.append(("Warning", reason, message))
        elif finished is None and is_true(status, "SuccessCriteriaMet"):
            self._delete_pods(job, active, events)
            if not terminating and not active:
                _set_condition(status, "Complete", "True", *COMPLETIONS_REACHED)
                status["completionTime"] = status.get("completionTime") or now()
                events.append(("Normal", "Completed", "Job completed"))
        elif finished is not None or spec.get("suspend"):
            self._delete_pods(job, active, events)
            if finished is None and _set_condition(
                status, "Suspended", "True", "JobSuspended", "Job suspended"
            ):
                events.append(("Normal", "Suspended", "Job suspended"))
        else:
            if is_true(status, "Suspended"):
                _set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
                events.append(("Normal", "Resumed", "Job resumed"))
                status["startTime"] = now()  # the deadline counts from the resumption
            status["startTime"] = status.get("startTime") or now()
            failure = self._failure(job, status, active, new_failure)
            done = (
                len(succeeded_indexes) >= int(completions or 0)
                if indexed
                else (
                    status.get("succeeded", 0) >= int(completions)
                    if completions is not None
                    else status.get("succeeded", 0) > 0 and not active
                )
            )
            if failure is not None:
                _set_condition(status, "FailureTarget", "True", *failure)
                requeue = 0.0
            elif done:
                _set_condition(status, "SuccessCriteriaMet", "True", *COMPLETIONS_REACHED)
                requeue = 0.0
            else:
                requeue = self._create_pods(job, pods, active, succeeded_indexes, status, events)
            deadline = spec.get("activeDeadlineSeconds")
            if deadline is not None and failure is None and not done:
                left = parse_time(status["startTime"]) + int(deadline) - time.time()
                requeue = left if requeue is None else min(requeue, left)
        now_pods = self._pods_of(job)  # after this pass's creations and deletions
        active = [p for p in now_pods if _active(p)]
        terminating = [p for p in now_pods if _deleting(p) and not _terminal(p)]
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _ready(p))
        status["terminating"] = len(terminating)
        status.setdefault("uncountedTerminatedPods", {})
        for field in ("active", "succeeded", "failed"):
            if not status.get(field):
                status.pop(field, None)
        if status != old:

            def write(obj: Obj) -> None:
                obj["status"] = status

            self.api.mutate(JOBS, job["metadata"]["namespace"], job["metadata"]["name"], write)
        for event_type, reason, message in events:
            self.api.record_event(job, event_type, reason, message, COMPONENT)
        return requeue

    def _failure(
        self, job: Obj, status: Obj, active: list[Obj], new_failure: bool
    ) -> tuple[str, str] | None:
        spec = job["spec"]
        limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        failed = int(status.get("failed", 0))
        if new_failure and failed > limit:
            return BACKOFF_LIMIT_EXCEEDED
        if spec.get("template", {}).get("spec", {}).get("restartPolicy") == "OnFailure":
            restarts = sum(_restarts(p) for p in active if _phase(p) in ("Running", "Pending"))
            if (limit == 0 and restarts > 0) or (limit > 0 and restarts >= limit):
                return BACKOFF_LIMIT_EXCEEDED
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and status.get("startTime"):
            if time.time() >= parse_time(status["startTime"]) + int(deadline):
                return DEADLINE_EXCEEDED
        return None

    # --- pods ----------------------------------------------------------------------------

    def _pods_of(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [
            p
            for p in self.api.store.objects(PODS.key, job["metadata"]["namespace"])[0]
            if (ref := controller_of(p, "Job")) is not None and ref.get("uid") == uid
        ]

    def _create_pods(
        self,
        job: Obj,
        pods: list[Obj],
        active: list[Obj],
        succeeded: set[int],
        status: Obj,
        events: list[tuple[str, str, str]],
    ) -> float | None:
        spec = job["spec"]
        uid = job["metadata"]["uid"]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        room = parallelism - len(active)
        requeue: float | None = None
        if spec.get("completionMode") == "Indexed":
            # TerminatingOrFailed replaces a pod as soon as it terminates; Failed waits for
            # it to be gone.
            busy = {_index(p) for p in active}
            if spec.get("podReplacementPolicy") == "Failed":
                busy = {_index(p) for p in pods if not _terminal(p)}
            for index in range(int(completions or 0)):
                if room <= 0:
                    break
                if index in succeeded or index in busy:
                    continue
                wait = self._failed_at.get((uid, index), 0.0) + self.backoff - time.monotonic()
                if wait > 0:
                    requeue = wait if requeue is None else min(requeue, wait)
                    continue
                self._create_pod(job, index, events)
                room -= 1
            return requeue
        wanted = parallelism
        if completions is not None:
            wanted = min(parallelism, int(completions) - int(status.get("succeeded", 0)))
        wait = self._failed_at.get((uid, -1), 0.0) + self.backoff - time.monotonic()
        if wait > 0 and len(active) < wanted:
            return wait
        for _ in range(max(0, wanted - len(active))):
            self._create_pod(job, None, events)
        return None

    def _create_pod(self, job: Obj, index: int | None, events: list[tuple[str, str, str]]) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        template = deep(job["spec"].get("template", {}))
        meta = template.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        pod_spec = template.get("spec", {})
        if index is not None:
            annotations[COMPLETION_INDEX] = str(index)
            labels[COMPLETION_INDEX] = str(index)
            pod_spec["hostname"] = pod_spec.get("hostname") or f"{name}-{index}"
            for container in pod_spec.get("initContainers", []) + pod_spec.get("containers", []):
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append(
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']",
                                }
                            },
                        }
                    )
        pod_meta: Obj = {
            "generateName": f"{name}-{index}-" if index is not None else f"{name}-",
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "finalizers": [TRACKING_FINALIZER],
            "ownerReferences": [owner_ref(job)],
        }
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}
        try:
            created, _ = self.api.create(PODS, namespace, pod)
        except ApiError as exc:
            events.append(("Warning", "FailedCreate", f"Error creating: {exc.message}"))
            return
        events.append(("Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"))

    def _delete_pods(self, job: Obj, pods: list[Obj], events: list[tuple[str, str, str]]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            self._deleted.add(meta["uid"])
            try:
                self.api.delete(PODS, meta["namespace"], meta["name"])
            except ApiError:
                continue
            events.append(("Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}"))

    def _release(self, pod: Obj) -> None:
        """Remove the tracking finalizer (the pod is counted, or nothing will count it)."""
        meta = pod["metadata"]
        if TRACKING_FINALIZER in meta.get("finalizers", []):
            self.api.drop_finalizer(PODS, meta["namespace"], meta["name"], TRACKING_FINALIZER)
            self._deleted.discard(meta["uid"])


def _ref_uid(pod: Obj, uid: str | None) -> Obj | None:
    """The pod's controller reference if it points at the Job with ``uid``."""
    ref = controller_of(pod, "Job")
    return ref if ref is not None and uid is not None and ref.get("uid") == uid else None
