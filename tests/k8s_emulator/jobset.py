"""JobSet (``jobset.x-k8s.io/v1alpha2``, JobSet v0.12.0): its webhook defaults and controller.

This module holds the API's names, the defaults and the status being built; the
controller is ``jobset_controller.py``, the Jobs and Service it makes ``jobset_jobs.py``.

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

from .meta import Obj, deep, now

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


def find_condition(status: Obj, kind: str) -> Obj | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def is_true(status: Obj, kind: str) -> bool:
    cond = find_condition(status, kind)
    return bool(cond and cond.get("status") == "True")


def finished(js: Obj) -> bool:
    status = js.get("status") or {}
    return is_true(status, "Completed") or is_true(status, "Failed")


def subdomain(js: Obj) -> str:
    return str((js["spec"].get("network") or {}).get("subdomain") or js["metadata"]["name"])


def job_name(js: Obj, rjob: str, index: int) -> str:
    return f"{js['metadata']['name']}-{rjob}-{index}"


def _exclusive(a: str, b: str) -> bool:
    return {a, b} == {"StartupPolicyInProgress", "StartupPolicyCompleted"}


class JobSetStatus:
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
