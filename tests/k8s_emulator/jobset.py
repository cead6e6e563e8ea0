"""JobSet (``jobset.x-k8s.io/v1alpha2``, JobSet v0.12.0): its webhook defaults and controller.

* Webhook defaults: ``successPolicy {operator: All}``, ``startupPolicy
  {startupPolicyOrder: AnyOrder}``, ``completionMode: Indexed`` and pod
  ``restartPolicy: OnFailure`` on every replicated job, ``network
  {enableDNSHostnames: true, publishNotReadyAddresses: true}``, failure
  policy rule names; the CRD's ``replicas: 1``, ``groupName: default``,
  ``restartStrategy: Recreate``.
* One ``batch/v1`` Job per replica of each replicated job, named
  ``<jobset>-<replicatedJob>-<index>``, with JobSet's labels and annotations
  (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``,
  ``job-global-index``, ``restart-attempt``, ``job-key``...) on the Job and its
  pod template, pods under ``subdomain: <jobset>`` with a headless Service of
  that name (``publishNotReadyAddresses``), ``startupPolicy: InOrder`` and
  ``dependsOn`` honoured.
* ``suspend`` suspends and resumes the Jobs (merging the pod template's
  labels, annotations, nodeSelector, tolerations and scheduling gates into the
  suspended Jobs, for Kueue).
* Failure policy: none means ``Failed`` at the first failed Job
  (``FailedJobs``); rules (``onJobFailureReasons``, message patterns,
  ``targetReplicatedJobs``) choose ``FailJobSet``, ``RestartJobSet`` (counted
  against ``maxRestarts``, then ``ReachedMaxRestarts``) or
  ``RestartJobSetAndIgnoreMaxRestarts``; a restart recreates every Job with
  the next ``restart-attempt`` (``Recreate`` or ``BlockingRecreate``).
* Success policy (``All``/``Any`` of ``targetReplicatedJobs``) → ``Completed``
  (``AllJobsCompleted``); active Jobs are deleted once the JobSet has ended;
  ``ttlSecondsAfterFinished``.
* Status: ``replicatedJobsStatus`` (Jobs ``ready``, ``succeeded``, ``failed``,
  ``active``, ``suspended`` per replicated job), ``restarts``,
  ``restartsCountTowardsMax``, ``terminalState`` and conditions with the
  controller's reasons, messages and Events.
"""

from __future__ import annotations

import hashlib
import re
import time

from .apiserver import ApiServer
from .batchjob import condition as job_condition
from .batchjob import job_finished
from .loop import ControlLoop, Key, controller_of, owner_ref
from .meta import ApiError, Obj, deep, now, parse_time
from .resources import JOBS, JOBSETS, SERVICES
from .store import Event

COMPONENT = "jobset"
GROUP = "jobset.x-k8s.io"
API_VERSION = f"{GROUP}/v1alpha2"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"

LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LABEL_JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
LABEL_RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
LABEL_GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"
LABEL_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
LABEL_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
LABEL_JOB_KEY = "jobset.sigs.k8s.io/job-key"
LABEL_GROUP_NAME = "jobset.sigs.k8s.io/group-name"
LABEL_GROUP_REPLICAS = "jobset.sigs.k8s.io/group-replicas"
LABEL_JOB_GROUP_INDEX = "jobset.sigs.k8s.io/job-group-index"
LABEL_RESTARTS = "jobset.sigs.k8s.io/restart-attempt"
LABEL_COORDINATOR = "jobset.sigs.k8s.io/coordinator"

ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = (
    "ReachedMaxRestarts",
    "jobset failed due to reaching max number of restarts",
)
FAIL_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_ACTION = (
    "RestartJobSetFailurePolicyAction",
    "applying RestartJobSet failure policy action",
)
RESTART_IGNORE_MAX_ACTION = (
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
    "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
)
SUSPENDED = ("SuspendedJobs", "jobset is suspended")
RESUMED = ("ResumeJobs", "jobset is resumed")
JOBS_READY = ("JobsReady", "all jobs are ready")
IN_ORDER_PROGRESS = ("InOrderStartupPolicyInProgress", "in order startup policy is in progress")
IN_ORDER_COMPLETED = ("InOrderStartupPolicyCompleted", "in order startup policy has completed")


# --- webhook -------------------------------------------------------------------------------------


def default_jobset(operation: str, js: Obj, old: Obj | None) -> None:
    """JobSet's mutating webhook and its CRD's defaults."""
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec["successPolicy"].setdefault("operator", "All")
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs", []):
        rjob.setdefault("replicas", 1)
        rjob.setdefault("groupName", "default")
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    policy = spec.get("failurePolicy")
    if policy is not None:
        policy.setdefault("restartStrategy", "Recreate")
        for index, rule in enumerate(policy.get("rules", [])):
            if not rule.get("name"):
                rule["name"] = f"failurePolicyRule{index}"


# --- helpers --------------------------------------------------------------------------------------


def _cond(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def _true(status: Obj, kind: str) -> bool:
    cond = _cond(status, kind)
    return bool(cond and cond.get("status") == "True")


def finished(js: Obj) -> bool:
    status = js.get("status") or {}
    return _true(status, "Completed") or _true(status, "Failed")


def subdomain(js: Obj) -> str:
    return str((js["spec"].get("network") or {}).get("subdomain") or js["metadata"]["name"])


def job_name(js: Obj, rjob: str, index: int) -> str:
    return f"{js['metadata']['name']}-{rjob}-{index}"


def _exclusive(a: str, b: str) -> bool:
    return {a, b} == {"StartupPolicyInProgress", "StartupPolicyCompleted"}


class _Status:
    """The status being built, with the conditions' Events (``updateCondition``)."""

    def __init__(self, js: Obj) -> None:
        self.status: Obj = deep(js.get("status") or {})
        self.events: list[tuple[str, str, str]] = []

    def set(self, kind: str, value: str, reason: str, message: str, event_type: str) -> None:
        stamp = now()
        conditions = self.status.setdefault("conditions", [])
        changed, found = False, False
        new = {
            "type": kind,
            "status": value,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }
        for index, current in enumerate(conditions):
            if current["type"] == kind:
                found = True
                if current["status"] != value:
                    conditions[index] = new
                    changed = True
                elif (current.get("reason"), current.get("message")) != (reason, message):
                    conditions[index] = {**new, "lastTransitionTime": current["lastTransitionTime"]}
                    changed = True
            elif _exclusive(current["type"], kind) and current["status"] == value == "True":
                current["status"] = "False"
                changed = True
        if not found and value == "True":
            conditions.append(new)
            changed = True
        if not conditions:
            self.status.pop("conditions")
        if changed:
            self.events.append((event_type, reason, message))

    def restarting_false(self, reason: str, message: str) -> None:
        self.set("RestartingJobSet", "False", reason, message, "Normal")

    def failed(self, reason: str, message: str) -> None:
        self.set("Failed", "True", reason, message, "Warning")
        self.restarting_false("JobSetFailed", "jobset failed")
        self.status["terminalState"] = "Failed"

    def completed(self) -> None:
        self.set("Completed", "True", *ALL_JOBS_COMPLETED, "Normal")
        self.restarting_false("JobSetCompleted", ALL_JOBS_COMPLETED[1])
        self.status["terminalState"] = "Completed"


# --- the controller -----------------------------------------------------------------------------


class JobSetController(ControlLoop):
    """JobSet's controller manager, for every JobSet."""

    name = "jobset-controller"

    def __init__(self, api: ApiServer) -> None:
        super().__init__(api)

    def keys_for(self, event: Event) -> list[Key]:
        meta = event.obj["metadata"]
        if event.resource == JOBSETS.key:
            return [(meta["namespace"], meta["name"])]
        if event.resource in (JOBS.key, SERVICES.key):
            ref = controller_of(event.obj, "JobSet")
            if ref is not None and ref.get("apiVersion") == API_VERSION:
                return [(meta["namespace"], ref["name"])]
        return []

    def resync(self) -> list[Key]:
        """Finished JobSets with a TTL."""
        return [
            (js["metadata"]["namespace"], js["metadata"]["name"])
            for js in self.api.store.objects(JOBSETS.key)[0]
            if js["spec"].get("ttlSecondsAfterFinished") is not None and finished(js)
        ]

    def reconcile(self, key: Key) -> float | None:
        namespace, name = key
        js = self.api.store.get(JOBSETS.key, namespace, name)
        if js is None or js["metadata"].get("deletionTimestamp"):
            return None
        managed_by = js["spec"].get("managedBy")
        if managed_by and managed_by != CONTROLLER_NAME:
            return None
        state = _Status(js)
        requeue = self._reconcile(js, state)
        if state.status != (js.get("status") or {}):

            def write(obj: Obj) -> None:
                obj["status"] = state.status

            self.api.mutate(JOBSETS, namespace, name, write)
            for event_type, reason, message in state.events:
                self.api.record_event(js, event_type, reason, message, COMPONENT)
        return requeue

    def _children(self, js: Obj) -> dict[str, list[Obj]]:
        uid = js["metadata"]["uid"]
        restarts = int((js.get("status") or {}).get("restarts", 0))
        out: dict[str, list[Obj]] = {"active": [], "successful": [], "failed": [], "previous": []}
        for job in self.api.store.objects(JOBS.key, js["metadata"]["namespace"])[0]:
            ref = controller_of(job, "JobSet")
            if ref is None or ref.get("uid") != uid:
                continue
            attempt = (job["metadata"].get("labels") or {}).get(LABEL_RESTARTS, "")
            if not attempt.isdigit() or int(attempt) < restarts:
                out["previous"].append(job)
                continue
            end = job_finished(job)
            kind = {"Failed": "failed", "Complete": "successful"}.get(end or "", "active")
            out[kind].append(job)
        return out

    def _reconcile(self, js: Obj, state: _Status) -> float | None:
        spec = js["spec"]
        jobs = self._children(js)
        statuses = self._replicated_statuses(js, jobs)
        if statuses != state.status.get("replicatedJobsStatus"):
            state.status["replicatedJobsStatus"] = statuses
        if finished({"status": state.status}):
            self._delete_jobs(jobs["active"])
            return self._ttl(js, state)
        self._delete_jobs(jobs["previous"])
        suspended = bool(spec.get("suspend"))
        if not suspended and self._all_ready(js, statuses):
            state.restarting_false(*JOBS_READY)
        if jobs["failed"]:
            self._failure_policy(js, jobs, state)
            return None
        if jobs["successful"] and self._success(js, jobs["successful"]):
            state.completed()
            return None
        self._headless_service(js)
        self._create_jobs(js, jobs, statuses, state)
        if suspended:
            for job in jobs["active"]:
                if not job["spec"].get("suspend"):
                    self._set_job_suspend(job, True)
            state.set("Suspended", "True", *SUSPENDED, "Normal")
            state.restarting_false("JobSetSuspended", SUSPENDED[1])
        else:
            self._resume(js, jobs["active"], statuses, state)
        return None

    # --- status --------------------------------------------------------------------------

    def _replicated_statuses(self, js: Obj, jobs: dict[str, list[Obj]]) -> list[Obj]:
        counts: dict[str, dict[str, int]] = {
            rjob["name"]: {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            for rjob in js["spec"].get("replicatedJobs", [])
        }
        for kind in ("active", "successful", "failed"):
            for job in jobs[kind]:
                rjob = (job["metadata"].get("labels") or {}).get(LABEL_RJOB_NAME, "")
                if rjob not in counts:
                    continue
                if kind == "successful":
                    counts[rjob]["succeeded"] += 1
                elif kind == "failed":
                    counts[rjob]["failed"] += 1
                else:
                    status = job.get("status") or {}
                    pods = int(job["spec"].get("parallelism", 1))
                    if job["spec"].get("completions") is not None:
                        pods = min(pods, int(job["spec"]["completions"]))
                    if int(status.get("succeeded", 0)) + int(status.get("ready", 0)) >= pods:
                        counts[rjob]["ready"] += 1
                    if int(status.get("active", 0)) > 0:
                        counts[rjob]["active"] += 1
                    if job["spec"].get("suspend"):
                        counts[rjob]["suspended"] += 1
        # The controller compares (and so stores) them sorted by name, last first.
        return [{"name": name, **counts[name]} for name in sorted(counts, reverse=True)]

    @staticmethod
    def _all_ready(js: Obj, statuses: list[Obj]) -> bool:
        total = sum(int(r.get("replicas", 1)) for r in js["spec"].get("replicatedJobs", []))
        return total == sum(int(s["ready"]) + int(s["succeeded"]) for s in statuses)

    # --- failure and success policies ----------------------------------------------------

    @staticmethod
    def _failure_time(job: Obj) -> str:
        cond = job_condition(job.get("status") or {}, "Failed") or {}
        return str(cond.get("lastTransitionTime", ""))

    def _failure_policy(self, js: Obj, jobs: dict[str, list[Obj]], state: _Status) -> None:
        failed = sorted(jobs["failed"], key=self._failure_time)
        policy = js["spec"].get("failurePolicy")
        first = failed[0]["metadata"]["name"]
        if policy is None:
            reason, message = FAILED_JOBS
            state.failed(reason, f"{message} (first failed job: {first})")
            return
        rule, job = self._matching_rule(policy.get("rules", []), failed)
        action = rule["action"] if rule is not None else "RestartJobSet"
        name = (job or failed[0])["metadata"]["name"]
        if action == "FailJobSet":
            state.failed(FAIL_ACTION[0], f"{FAIL_ACTION[1]} (first failed job: {name})")
            return
        if action not in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"):
            # RestartJob needs the RestartJob feature gate, off by default.
            return
        counted = action == "RestartJobSet"
        if counted and int(state.status.get("restartsCountTowardsMax", 0)) >= int(
            policy.get("maxRestarts", 0)
        ):
            reason, message = REACHED_MAX_RESTARTS
            state.failed(reason, f"{message} (first failed job: {name})")
            return
        event_reason, base = RESTART_ACTION if counted else RESTART_IGNORE_MAX_ACTION
        message = f"{base} (first failed job: {name})"
        state.status["restarts"] = int(state.status.get("restarts", 0)) + 1
        if counted:
            state.status["restartsCountTowardsMax"] = (
                int(state.status.get("restartsCountTowardsMax", 0)) + 1
            )
        reason = f"FailurePolicy_{rule['name']}" if rule is not None else "DefaultFailurePolicy"
        state.set("RestartingJobSet", "True", reason, message, "Warning")
        state.events.append(("Warning", event_reason, message))

    @staticmethod
    def _matching_rule(rules: list[Obj], failed: list[Obj]) -> tuple[Obj | None, Obj | None]:
        for rule in rules:
            for job in failed:  # earliest failure first
                cond = job_condition(job.get("status") or {}, "Failed") or {}
                reasons = rule.get("onJobFailureReasons") or []
                if reasons and cond.get("reason") not in reasons:
                    continue
                patterns = rule.get("onJobFailureMessagePatterns") or []
                text = str(cond.get("message", ""))
                if patterns and not any(re.search(p, text) for p in patterns):
                    continue
                targets = rule.get("targetReplicatedJobs") or []
                rjob = (job["metadata"].get("labels") or {}).get(LABEL_RJOB_NAME)
                if not rjob or (targets and rjob not in targets):
                    continue
                return rule, job
        return None, None

    @staticmethod
    def _success(js: Obj, successful: list[Obj]) -> bool:
        policy = js["spec"].get("successPolicy") or {"operator": "All"}
        targets = policy.get("targetReplicatedJobs") or []

        def matches(rjob: str) -> bool:
            return not targets or rjob in targets

        done = sum(
            1
            for job in successful
            if matches((job["metadata"].get("labels") or {}).get(LABEL_RJOB_NAME, ""))
        )
        if policy.get("operator") == "Any":
            return done >= 1
        expected = sum(
            int(r.get("replicas", 1))
            for r in js["spec"].get("replicatedJobs", [])
            if matches(r["name"])
        )
        return done >= expected

    def _ttl(self, js: Obj, state: _Status) -> float | None:
        ttl = js["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return None
        ends = [
            c["lastTransitionTime"]
            for c in state.status.get("conditions", [])
            if c["type"] in ("Completed", "Failed") and c["status"] == "True"
        ]
        if not ends:
            return None
        left = parse_time(ends[0]) + int(ttl) - time.time()
        if left > 0:
            return left
        meta = js["metadata"]
        try:
            self.api.delete(JOBSETS, meta["namespace"], meta["name"], propagation="Foreground")
        except ApiError:
            pass
        return None

    # --- children ------------------------------------------------------------------------

    def _delete_jobs(self, jobs: list[Obj]) -> None:
        for job in jobs:
            meta = job["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                self.api.delete(JOBS, meta["namespace"], meta["name"], propagation="Foreground")
            except ApiError:
                continue

    def _headless_service(self, js: Obj) -> None:
        network = js["spec"].get("network") or {}
        if not network.get("enableDNSHostnames"):
            return
        namespace, name = js["metadata"]["namespace"], subdomain(js)
        if self.api.store.get(SERVICES.key, namespace, name) is not None:
            return
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner_ref(js)]},
            "spec": {
                "clusterIP": "None",
                "selector": {LABEL_JOBSET_NAME: js["metadata"]["name"]},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
            },
        }
        try:
            self.api.create(SERVICES, namespace, service)
        except ApiError as exc:
            if exc.code != 409:
                self.api.record_event(
                    js, "Warning", "HeadlessServiceCreationFailed", exc.message, COMPONENT
                )

    def _dependencies_met(self, rjob: Obj, replicas: dict[str, int], statuses: list[Obj]) -> bool:
        for dep in rjob.get("dependsOn") or []:
            status = next((s for s in statuses if s["name"] == dep["name"]), None)
            if status is None:
                return False
            wanted = replicas.get(dep["name"], 0)
            if dep.get("status") == "Complete" and status["succeeded"] != wanted:
                return False
            if (
                dep.get("status") == "Ready"
                and status["failed"] + status["ready"] + status["succeeded"] != wanted
            ):
                return False
        return True

    def _create_jobs(
        self, js: Obj, jobs: dict[str, list[Obj]], statuses: list[Obj], state: _Status
    ) -> None:
        spec = js["spec"]
        suspended = bool(spec.get("suspend"))
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        blocking = (spec.get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
        existing = {j["metadata"]["name"] for kind in jobs.values() for j in kind}
        replicas: dict[str, int] = {}
        for rjob in spec.get("replicatedJobs", []):
            replicas[rjob["name"]] = int(rjob.get("replicas", 1))
            if not self._dependencies_met(rjob, replicas, statuses):
                continue
            status = next((s for s in statuses if s["name"] == rjob["name"]), None)
            started = status is not None and replicas[rjob["name"]] == (
                status["failed"] + status["ready"] + status["succeeded"]
            )
            if not suspended and in_order and started:
                continue
            if not (blocking and jobs["previous"]):
                for index in range(replicas[rjob["name"]]):
                    if job_name(js, rjob["name"], index) not in existing:
                        self._create_job(js, rjob, index)
            if not suspended and in_order:
                state.set("StartupPolicyInProgress", "True", *IN_ORDER_PROGRESS, "Normal")
                return
        if not suspended and in_order:
            state.set("StartupPolicyCompleted", "True", *IN_ORDER_COMPLETED, "Normal")

    def _labels(self, js: Obj, rjob: Obj, index: int) -> dict[str, str]:
        spec = js["spec"]
        rjobs = spec.get("replicatedJobs", [])
        name = job_name(js, rjob["name"], index)
        group = rjob.get("groupName", "default")
        global_index = index + sum(int(r.get("replicas", 1)) for r in rjobs[: rjobs.index(rjob)])
        in_group = [r for r in rjobs if r.get("groupName", "default") == group]
        group_index = index + sum(
            int(r.get("replicas", 1)) for r in in_group[: in_group.index(rjob)]
        )
        namespace = js["metadata"]["namespace"]
        values = {
            LABEL_JOBSET_NAME: js["metadata"]["name"],
            LABEL_JOBSET_UID: js["metadata"]["uid"],
            LABEL_RJOB_NAME: rjob["name"],
            LABEL_RESTARTS: str(int((js.get("status") or {}).get("restarts", 0))),
            LABEL_RJOB_REPLICAS: str(int(rjob.get("replicas", 1))),
            LABEL_GLOBAL_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in rjobs)),
            LABEL_JOB_INDEX: str(index),
            LABEL_JOB_KEY: hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest(),
            LABEL_JOB_GLOBAL_INDEX: str(global_index),
            LABEL_GROUP_NAME: group,
            LABEL_GROUP_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in in_group)),
            LABEL_JOB_GROUP_INDEX: str(group_index),
        }
        coordinator = spec.get("coordinator")
        if coordinator:
            values[LABEL_COORDINATOR] = (
                f"{js['metadata']['name']}-{coordinator['replicatedJob']}-"
                f"{coordinator.get('jobIndex', 0)}-{coordinator.get('podIndex', 0)}.{subdomain(js)}"
            )
        return values

    def _create_job(self, js: Obj, rjob: Obj, index: int) -> None:
        namespace = js["metadata"]["namespace"]
        template = deep(rjob.get("template", {}))
        meta = template.get("metadata") or {}
        job_spec = template.get("spec", {})
        values = self._labels(js, rjob, index)
        pod_template = job_spec.setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **values}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **values}
        if (js["spec"].get("network") or {}).get("enableDNSHostnames"):
            pod_template.setdefault("spec", {})["subdomain"] = subdomain(js)
        job_spec["suspend"] = bool(js["spec"].get("suspend"))
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name(js, rjob["name"], index),
                "namespace": namespace,
                "labels": {**(meta.get("labels") or {}), **values},
                "annotations": {**(meta.get("annotations") or {}), **values},
                "ownerReferences": [owner_ref(js)],
            },
            "spec": job_spec,
        }
        try:
            self.api.create(JOBS, namespace, job)
        except ApiError as exc:
            if exc.code != 409:
                message = (
                    f'job "{job["metadata"]["name"]}" creation failed with error: {exc.message}'
                )
                self.api.record_event(js, "Warning", "JobCreationFailed", message, COMPONENT)

    def _set_job_suspend(self, job: Obj, suspend: bool) -> None:
        def change(obj: Obj) -> None:
            obj["spec"]["suspend"] = suspend

        meta = job["metadata"]
        self.api.mutate(JOBS, meta["namespace"], meta["name"], change)

    def _resume(self, js: Obj, active: list[Obj], statuses: list[Obj], state: _Status) -> None:
        spec = js["spec"]
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        replicas: dict[str, int] = {}
        for rjob in spec.get("replicatedJobs", []):
            replicas[rjob["name"]] = int(rjob.get("replicas", 1))
            if not self._dependencies_met(rjob, replicas, statuses):
                continue
            status = next((s for s in statuses if s["name"] == rjob["name"]), None)
            started = status is not None and replicas[rjob["name"]] == (
                status["failed"] + status["ready"] + status["succeeded"]
            )
            if in_order and started:
                continue
            template = rjob.get("template", {}).get("spec", {}).get("template", {})
            for job in active:
                labels = job["metadata"].get("labels") or {}
                if labels.get(LABEL_RJOB_NAME) == rjob["name"] and job["spec"].get("suspend"):
                    self._resume_job(job, template)
            if in_order:
                state.set("StartupPolicyInProgress", "True", *IN_ORDER_PROGRESS, "Normal")
                return
        state.set("Suspended", "False", *RESUMED, "Normal")

    def _resume_job(self, job: Obj, template: Obj) -> None:
        meta = template.get("metadata") or {}
        pod_spec = template.get("spec") or {}

        def change(obj: Obj) -> None:
            target = obj["spec"].setdefault("template", {})
            target_meta = target.setdefault("metadata", {})
            target_spec = target.setdefault("spec", {})
            for field in ("labels", "annotations"):
                merged = {**(target_meta.get(field) or {}), **(meta.get(field) or {})}
                if merged:
                    target_meta[field] = merged
            selector = {
                **(target_spec.get("nodeSelector") or {}),
                **(pod_spec.get("nodeSelector") or {}),
            }
            if selector:
                target_spec["nodeSelector"] = selector
            for field in ("tolerations", "schedulingGates"):
                items = list(target_spec.get(field) or [])
                items += [i for i in pod_spec.get(field) or [] if i not in items]
                if items:
                    target_spec[field] = items
            obj["spec"]["suspend"] = False
            (obj.get("status") or {}).pop("startTime", None)

        self.api.mutate(JOBS, job["metadata"]["namespace"], job["metadata"]["name"], change)
