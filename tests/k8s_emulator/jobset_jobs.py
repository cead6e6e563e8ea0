"""The JobSet controller's children: its batch Jobs and headless Service, suspend and resume.

One Job per replica of each replicated job (``<jobset>-<replicatedJob>-<index>``)
with JobSet's labels and annotations, ``startupPolicy: InOrder`` and
``dependsOn`` honoured; suspending and resuming the Jobs (``jobset.py`` has the
whole contract).
"""

from __future__ import annotations

import hashlib

from .apiserver import ApiServer
from .jobset import (
    COMPONENT,
    IN_ORDER_COMPLETED,
    IN_ORDER_PROGRESS,
    LABEL_COORDINATOR,
    LABEL_GLOBAL_REPLICAS,
    LABEL_GROUP_NAME,
    LABEL_GROUP_REPLICAS,
    LABEL_JOB_GLOBAL_INDEX,
    LABEL_JOB_GROUP_INDEX,
    LABEL_JOB_INDEX,
    LABEL_JOB_KEY,
    LABEL_JOBSET_NAME,
    LABEL_JOBSET_UID,
    LABEL_RESTARTS,
    LABEL_RJOB_NAME,
    LABEL_RJOB_REPLICAS,
    RESUMED,
    JobSetStatus,
    job_name,
    subdomain,
)
from .loop import owner_ref
from .meta import ApiError, Obj, deep
from .resources import JOBS, SERVICES


class JobSetJobs:
    """Jobs and the Service of :class:`~.jobset_controller.JobSetController` (mixed into it).

    Uses the controller's ``api``.
    """

    api: ApiServer

    # --- children ------------------------------------------------------------------------

    def delete_jobs(self, jobs: list[Obj]) -> None:
        for job in jobs:
            meta = job["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                self.api.delete(JOBS, meta["namespace"], meta["name"], propagation="Foreground")
            except ApiError:
                continue

    def headless_service(self, js: Obj) -> None:
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

    def create_jobs(
        self, js: Obj, jobs: dict[str, list[Obj]], statuses: list[Obj], state: JobSetStatus
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

    def set_job_suspend(self, job: Obj, suspend: bool) -> None:
        def change(obj: Obj) -> None:
            obj["spec"]["suspend"] = suspend

        meta = job["metadata"]
        self.api.mutate(JOBS, meta["namespace"], meta["name"], change)

    def resume_jobs(
        self, js: Obj, active: list[Obj], statuses: list[Obj], state: JobSetStatus
    ) -> None:
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
