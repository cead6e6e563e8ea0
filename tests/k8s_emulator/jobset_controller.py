"""The JobSet controller (JobSet v0.12.0): reconcile, status, failure and success policies.

What it does is listed in ``jobset.py``; the Jobs and the headless Service it
makes are ``jobset_jobs.py``.
"""

from __future__ import annotations

import re
import time

from .apiserver import ApiServer
from .batchjob import condition as job_condition
from .batchjob import job_finished
from .jobset import (
    API_VERSION,
    COMPONENT,
    CONTROLLER_NAME,
    FAIL_ACTION,
    FAILED_JOBS,
    JOBS_READY,
    LABEL_RESTARTS,
    LABEL_RJOB_NAME,
    REACHED_MAX_RESTARTS,
    RESTART_ACTION,
    RESTART_IGNORE_MAX_ACTION,
    SUSPENDED,
    JobSetStatus,
    finished,
)
from .jobset_jobs import JobSetJobs
from .loop import ControlLoop, Key, controller_of
from .meta import ApiError, Obj, parse_time
from .resources import JOBS, JOBSETS, SERVICES
from .store import Event

# --- the controller -----------------------------------------------------------------------------


class JobSetController(JobSetJobs, ControlLoop):
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
        state = JobSetStatus(js)
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

    def _reconcile(self, js: Obj, state: JobSetStatus) -> float | None:
        spec = js["spec"]
        jobs = self._children(js)
        statuses = self._replicated_statuses(js, jobs)
        if statuses != state.status.get("replicatedJobsStatus"):
            state.status["replicatedJobsStatus"] = statuses
        if finished({"status": state.status}):
            self.delete_jobs(jobs["active"])
            return self._ttl(js, state)
        self.delete_jobs(jobs["previous"])
        suspended = bool(spec.get("suspend"))
        if not suspended and self._all_ready(js, statuses):
            state.restarting_false(*JOBS_READY)
        if jobs["failed"]:
            self._failure_policy(js, jobs, state)
            return None
        if jobs["successful"] and self._success(js, jobs["successful"]):
            state.completed()
            return None
        self.headless_service(js)
        self.create_jobs(js, jobs, statuses, state)
        if suspended:
            for job in jobs["active"]:
                if not job["spec"].get("suspend"):
                    self.set_job_suspend(job, True)
            state.set("Suspended", "True", *SUSPENDED, "Normal")
            state.restarting_false("JobSetSuspended", SUSPENDED[1])
        else:
            self.resume_jobs(js, jobs["active"], statuses, state)
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

    def _failure_policy(self, js: Obj, jobs: dict[str, list[Obj]], state: JobSetStatus) -> None:
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

    def _ttl(self, js: Obj, state: JobSetStatus) -> float | None:
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
