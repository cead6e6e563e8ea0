"""The Kubeflow Training Operator (v1.9, ``kubeflow.org/v1``) for PyTorchJob and TFJob.

Follows the operator's reconcile loop: defaults applied in memory, one pod and
one headless Service per replica (``<job>-<type>-<index>``) with the
operator's labels, environment (``MASTER_ADDR``, ``PET_*``, ``TF_CONFIG``) and
init container, ``ExitCode`` restarts, ``backoffLimit`` (container restarts of
running pods), ``activeDeadlineSeconds``, ``cleanPodPolicy``,
``ttlSecondsAfterFinished`` and ``suspend``, and ``status.conditions`` /
``replicaStatuses`` / ``startTime`` / ``completionTime`` with the operator's
reasons and messages. Restarts under ``OnFailure`` happen in place in the
kubelet; as with the real operator they show in the pods' ``restartCount``,
not as a job condition.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from .apiserver import ApiServer
from .apiserver_delete import owned_by
from .kubeflow import (
    FRAMEWORKS,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_OPERATOR,
    LABEL_TYPE,
    PYTORCH,
    TENSORFLOW,
    Framework,
    _active,
    _condition,
    _exit_code,
    _init_container,
    _phase,
    _port,
    _type,
    finished,
    is_true,
    owner_reference,
    pytorch_env,
    replica_labels,
    set_condition,
    tf_config,
    with_defaults,
)
from .loop import ERROR_BACKOFF
from .meta import ApiError, Obj, deep, now, parse_time
from .resources import PODS, SERVICES, Resource
from .store import DELETED, Event

log = logging.getLogger(__name__)
# --- the controller ----------------------------------------------------------------------------


class Operator:
    """Reconciles PyTorchJobs and TFJobs on a thread of its own."""

    def __init__(self, api: ApiServer, resources: dict[str, Resource], tick: float = 0.2) -> None:
        self.api = api
        #: Resource per framework kind (PyTorchJob, TFJob).
        self.resources = resources
        self._by_key = {r.key: fw for fw in FRAMEWORKS if (r := resources.get(fw.kind)) is not None}
        self._tick = tick
        self._queue: queue.Queue[tuple[Framework, str, str] | None] = queue.Queue()
        self._pending: set[tuple[Framework, str, str]] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        #: Failed reconciles in a row, by job (each is retried after a back-off).
        self.failures: dict[tuple[Framework, str, str], int] = {}
        self._unsubscribe = api.store.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._loop, name="training-operator", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._unsubscribe()
        self._closed.set()
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _enqueue(self, fw: Framework, namespace: str, name: str) -> None:
        item = (fw, namespace, name)
        with self._lock:
            if item in self._pending:
                return
            self._pending.add(item)
        self._queue.put(item)

    def _on_event(self, event: Event) -> None:
        meta = event.obj["metadata"]
        fw = self._by_key.get(event.resource)
        if fw is not None:
            if event.type != DELETED:
                self._enqueue(fw, meta["namespace"], meta["name"])
            return
        if event.resource not in (PODS.key, SERVICES.key):
            return
        for ref in meta.get("ownerReferences", []):
            owner = next((f for f in FRAMEWORKS if f.kind == ref.get("kind")), None)
            if owner is not None and ref.get("controller"):
                self._enqueue(owner, meta["namespace"], ref["name"])

    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                item = self._queue.get(timeout=self._tick)
            except queue.Empty:
                self._periodic()
                continue
            if item is None:
                return
            with self._lock:
                self._pending.discard(item)
            try:
                self.reconcile(*item)
            except Exception as exc:  # looked at again after a back-off, as a work queue does
                if isinstance(exc, ApiError):
                    log.debug("reconcile %s/%s: %s", item[1], item[2], exc.message)
                else:
                    log.exception("reconcile %s %s/%s failed", item[0].kind, item[1], item[2])
                self._retry(item)
            else:
                self.failures.pop(item, None)

    def _retry(self, item: tuple[Framework, str, str]) -> None:
        count = self.failures[item] = self.failures.get(item, 0) + 1
        first, cap = ERROR_BACKOFF
        timer = threading.Timer(min(cap, first * 2 ** (count - 1)), self._enqueue, item)
        timer.daemon = True
        timer.start()

    def _periodic(self) -> None:
        """Jobs with a deadline or a TTL are looked at again every tick."""
        for fw in FRAMEWORKS:
            resource = self.resources.get(fw.kind)
            if resource is None:
                continue
            items, _ = self.api.store.objects(resource.key)
            for job in items:
                policy = job.get("spec", {}).get("runPolicy", {})
                if "activeDeadlineSeconds" in policy or "ttlSecondsAfterFinished" in policy:
                    self._enqueue(fw, job["metadata"]["namespace"], job["metadata"]["name"])

    # --- reconcile -----------------------------------------------------------------------

    def reconcile(self, fw: Framework, namespace: str, name: str) -> None:
        resource = self.resources[fw.kind]
        job = self.api.store.get(resource.key, namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        spec = with_defaults(fw, job.get("spec", {}))
        old = job.get("status") or {}
        status = deep(old)
        if _condition(status, "Created") is None:
            set_condition(
                status, "Created", "True", f"{fw.kind}Created", f"{fw.kind} {name} is created."
            )
        status.setdefault("replicaStatuses", {})
        uid = job["metadata"]["uid"]
        pods = [
            p
            for p in self.api.store.objects(PODS.key, namespace)[0]
            if p["metadata"].get("labels", {}).get(LABEL_JOB) == name and owned_by(p, uid)
        ]
        replicas = spec.get(fw.replicas_field, {})
        policy = spec["runPolicy"]
        if finished(status):
            self._clean(job, policy, status, pods)
            if is_true(status, "Succeeded"):
                for counts in status["replicaStatuses"].values():
                    counts["succeeded"] = counts.get("succeeded", 0) + counts.pop("active", 0)
                    if not counts["succeeded"]:
                        counts.pop("succeeded")
            self._write(resource, job, old, status)
            self._expire(resource, job, policy, status)
            return
        if policy.get("suspend"):
            self._suspend(fw, resource, job, old, status, pods)
            return
        if is_true(status, "Suspended"):
            message = f"{fw.kind} {name} is resumed."
            set_condition(status, "Suspended", "False", f"{fw.kind}Resumed", message)
            status["startTime"] = now()
            self.api.record_event(job, "Normal", f"{fw.kind}Resumed", message, fw.controller)
        failure = self._limit_exceeded(job, spec, status, pods)
        if failure:
            status.setdefault("completionTime", now())
            self.api.record_event(job, "Normal", f"{fw.kind}Failed", failure, fw.controller)
            set_condition(status, "Failed", "True", f"{fw.kind}Failed", failure)
            self._clean(job, policy, status, pods)
            self._write(resource, job, old, status)
            return
        self._reconcile_services(fw, job, spec)
        for rtype in fw.order:
            if rtype in replicas:
                self._reconcile_pods(fw, job, spec, status, pods, rtype)
        self._update_status(fw, job, spec, status, pods)
        self._write(resource, job, old, status)

    def _write(self, resource: Resource, job: Obj, old: Obj, status: Obj) -> None:
        if status != old:
            meta = job["metadata"]
            self.api.mutate(
                resource, meta["namespace"], meta["name"], lambda o: o.__setitem__("status", status)
            )

    def _limit_exceeded(self, job: Obj, spec: Obj, status: Obj, pods: list[Obj]) -> str | None:
        name, policy = job["metadata"]["name"], spec["runPolicy"]
        replicas = spec.get(self._fw(job).replicas_field, {})
        limit = policy.get("backoffLimit")
        if limit is not None:
            active = sum(1 for p in pods if _active(p))
            failed = sum(1 for p in pods if _phase(p) == "Failed")
            total = sum(int(r.get("replicas", 1)) for r in replicas.values())
            before = sum(c.get("failed", 0) for c in status["replicaStatuses"].values())
            exceeds = failed > before and active != total and 1 > int(limit)
            restarts = 0
            for rtype, replica in replicas.items():
                if replica.get("restartPolicy") not in ("OnFailure", "Always"):
                    continue
                for pod in pods:
                    if _type(pod) == rtype.lower() and _phase(pod) == "Running":
                        statuses = pod.get("status", {}).get("initContainerStatuses", []) + pod.get(
                            "status", {}
                        ).get("containerStatuses", [])
                        restarts += sum(int(s.get("restartCount", 0)) for s in statuses)
            past = restarts > 0 if int(limit) == 0 else restarts >= int(limit)
            if exceeds or past:
                return f"Job {name} has failed because it has reached the specified backoff limit"
        deadline = policy.get("activeDeadlineSeconds")
        start = status.get("startTime")
        if deadline is not None and start and time.time() - parse_time(start) >= int(deadline):
            return f"Job {name} has failed because it was active longer than specified deadline"
        return None

    def _fw(self, job: Obj) -> Framework:
        return next(fw for fw in FRAMEWORKS if fw.kind == job["kind"])

    def _clean(self, job: Obj, policy: Obj, status: Obj, pods: list[Obj]) -> None:
        """DeletePodsAndServices: honour cleanPodPolicy once the job has finished."""
        clean = policy.get("cleanPodPolicy", "None")
        if finished(status) and clean == "None":
            return
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if (
                finished(status)
                and clean == "Running"
                and _phase(pod) not in ("Running", "Pending")
            ):
                continue
            self._delete_pod(job, pod)

    def _delete_pod(self, job: Obj, pod: Obj) -> None:
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        fw = self._fw(job)
        for resource in (PODS, SERVICES):
            try:
                self.api.delete(resource, namespace, name)
            except ApiError:
                continue
            kind = "Pod" if resource is PODS else "Service"
            self.api.record_event(
                job,
                "Normal",
                f"SuccessfulDelete{kind}",
                f"Deleted {kind.lower()}: {name}",
                fw.controller,
            )

    def _expire(self, resource: Resource, job: Obj, policy: Obj, status: Obj) -> None:
        ttl, done = policy.get("ttlSecondsAfterFinished"), status.get("completionTime")
        if ttl is None or not done or time.time() < parse_time(done) + int(ttl):
            return
        try:
            self.api.delete(resource, job["metadata"]["namespace"], job["metadata"]["name"])
        except ApiError:
            pass

    def _suspend(
        self,
        fw: Framework,
        resource: Resource,
        job: Obj,
        old: Obj,
        status: Obj,
        pods: list[Obj],
    ) -> None:
        name = job["metadata"]["name"]
        self._clean(job, job.get("spec", {}).get("runPolicy", {}), status, pods)
        for counts in status["replicaStatuses"].values():
            counts.pop("active", None)
        message = f"{fw.kind} {name} is suspended."
        if is_true(status, "Running"):
            set_condition(status, "Running", "False", f"{fw.kind}Suspended", message)
        if not is_true(status, "Suspended"):
            set_condition(status, "Suspended", "True", f"{fw.kind}Suspended", message)
            self.api.record_event(job, "Normal", f"{fw.kind}Suspended", message, fw.controller)
        self._write(resource, job, old, status)

    def _reconcile_pods(
        self, fw: Framework, job: Obj, spec: Obj, status: Obj, pods: list[Obj], rtype: str
    ) -> None:
        replica = spec[fw.replicas_field][rtype]
        count = int(replica.get("replicas", 1))
        counts: dict[str, Any] = {}
        status["replicaStatuses"][rtype] = counts
        mine = [p for p in pods if _type(p) == rtype.lower()]
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        for index in range(count):
            slot = [p for p in mine if p["metadata"]["labels"].get(LABEL_INDEX) == str(index)]
            if not slot:
                self._create_pod(fw, job, spec, rtype, index)
                continue
            pod = slot[0]
            code = _exit_code(pod, fw.container)
            if code is not None:
                self.api.record_event(
                    job,
                    "Normal",
                    "ExitedWithCode",
                    f"Pod: {namespace}.{pod['metadata']['name']} exited with code {code}",
                    fw.controller,
                )
            restart_policy = replica.get("restartPolicy")
            retry = (
                restart_policy == "ExitCode" and code is not None and code >= 128
            ) or restart_policy in ("OnFailure", "Always")
            if _phase(pod) == "Failed" and retry and not pod["metadata"].get("deletionTimestamp"):
                self._delete_pod(job, pod)
                if fw is TENSORFLOW and restart_policy == "ExitCode":
                    message = f"TFJob {name} is restarting because {rtype} replica(s) failed."
                    self.api.record_event(job, "Warning", "TFJobRestarting", message, fw.controller)
                    set_condition(status, "Restarting", "True", "TFJobRestarting", message)
            phase, deleting = _phase(pod), bool(pod["metadata"].get("deletionTimestamp"))
            if phase == "Running" and not deleting:
                counts["active"] = counts.get("active", 0) + 1
            elif phase == "Succeeded":
                counts["succeeded"] = counts.get("succeeded", 0) + 1
            elif phase == "Failed" and not deleting:
                counts["failed"] = counts.get("failed", 0) + 1
        for pod in mine:
            index = pod["metadata"]["labels"].get(LABEL_INDEX, "")
            if not index.isdigit() or int(index) >= count:
                self._delete_pod(job, pod)

    def _reconcile_services(self, fw: Framework, job: Obj, spec: Obj) -> None:
        """A headless Service per replica, all made before the pods that name them start."""
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        services = {
            s["metadata"]["name"] for s in self.api.store.objects(SERVICES.key, namespace)[0]
        }
        for rtype in fw.order:
            replica = spec[fw.replicas_field].get(rtype)
            for index in range(int(replica.get("replicas", 1)) if replica else 0):
                if f"{name}-{rtype.lower()}-{index}" not in services:
                    self._create_service(fw, job, spec, rtype, index)

    def _create_pod(self, fw: Framework, job: Obj, spec: Obj, rtype: str, index: int) -> None:
        replica = spec[fw.replicas_field][rtype]
        template = deep(replica.get("template", {}))
        meta = template.get("metadata") or {}
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        pod_name = f"{name}-{rtype.lower()}-{index}"
        labels = {**(meta.get("labels") or {}), **replica_labels(fw, job, rtype, index, spec)}
        pod_meta: Obj = {"name": pod_name, "namespace": namespace, "labels": labels}
        if meta.get("annotations"):
            pod_meta["annotations"] = meta["annotations"]
        pod_meta["ownerReferences"] = [owner_reference(job)]
        pod_spec = template.get("spec", {})
        restart = replica.get("restartPolicy", fw.default_restart)
        pod_spec["restartPolicy"] = "Never" if restart == "ExitCode" else restart
        if fw is PYTORCH:
            env = pytorch_env(name, spec, rtype, index)
            for container in pod_spec.get("containers", []):
                container["env"] = [*container.get("env", []), *deep(env)]
            if rtype == "Worker" and "Master" in spec[fw.replicas_field]:
                inits = pod_spec.setdefault("initContainers", [])
                inits.append(_init_container(f"{name}-master-0"))
        else:
            config = tf_config(name, namespace, spec, rtype, index)
            for container in pod_spec.get("containers", []):
                if config is not None and container.get("name") == fw.container:
                    container["env"] = [
                        *container.get("env", []),
                        {"name": "TF_CONFIG", "value": config},
                    ]
                    break
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}
        try:
            self.api.create(PODS, namespace, pod)
        except ApiError as exc:
            if exc.code == 409:
                return
            self.api.record_event(
                job, "Warning", "FailedCreatePod", f"Error creating: {exc.message}", fw.controller
            )
            return
        self.api.record_event(
            job, "Normal", "SuccessfulCreatePod", f"Created pod: {pod_name}", fw.controller
        )

    def _create_service(self, fw: Framework, job: Obj, spec: Obj, rtype: str, index: int) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        service_name = f"{name}-{rtype.lower()}-{index}"
        labels = replica_labels(fw, job, rtype, index, spec)
        port = _port(fw, spec, rtype) or fw.default_port
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": service_name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner_reference(job)],
            },
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [
                    {"name": fw.port_name, "port": port, "targetPort": port, "protocol": "TCP"}
                ],
            },
        }
        try:
            self.api.create(SERVICES, namespace, service)
        except ApiError:
            return
        self.api.record_event(
            job,
            "Normal",
            "SuccessfulCreateService",
            f"Created service: {service_name}",
            fw.controller,
        )

    # --- UpdateJobStatus -----------------------------------------------------------------

    def _update_status(
        self, fw: Framework, job: Obj, spec: Obj, status: Obj, pods: list[Obj]
    ) -> None:
        name = job["metadata"]["name"]
        if not status.get("startTime"):
            status["startTime"] = now()
        replicas = spec[fw.replicas_field]
        for rtype in fw.order:
            if rtype not in replicas:
                continue
            counts = status["replicaStatuses"].setdefault(rtype, {})
            selector = {LABEL_JOB: name, LABEL_OPERATOR: fw.controller, LABEL_TYPE: rtype.lower()}
            counts["selector"] = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        if fw is PYTORCH:
            self._pytorch_status(job, spec, status)
        else:
            self._tf_status(job, spec, status, pods)
        if "completionTime" not in status and finished(status):
            status["completionTime"] = now()

    def _succeed(self, fw: Framework, job: Obj, status: Obj, message: str) -> None:
        if not is_true(status, "Succeeded"):
            self.api.record_event(job, "Normal", f"{fw.kind}Succeeded", message, fw.controller)
        status.setdefault("completionTime", now())
        set_condition(status, "Succeeded", "True", f"{fw.kind}Succeeded", message)

    def _pytorch_status(self, job: Obj, spec: Obj, status: Obj) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        replicas = spec[PYTORCH.replicas_field]
        for rtype in PYTORCH.order:
            if rtype not in replicas:
                continue
            counts = status["replicaStatuses"][rtype]
            total = int(replicas[rtype].get("replicas", 1))
            running, succeeded = counts.get("active", 0), counts.get("succeeded", 0)
            failed = counts.get("failed", 0)
            if "Master" in replicas and rtype == "Master":
                if running > 0:
                    set_condition(
                        status,
                        "Running",
                        "True",
                        "PyTorchJobRunning",
                        f"PyTorchJob {name} is running.",
                    )
                if total - succeeded == 0:
                    self._succeed(
                        PYTORCH, job, status, f"PyTorchJob {name} is successfully completed."
                    )
                    return
            elif "Master" not in replicas and rtype == "Worker":
                elastic_done = spec.get("elasticPolicy") is not None and succeeded > 0
                if total - succeeded == 0 or elastic_done:
                    self._succeed(
                        PYTORCH,
                        job,
                        status,
                        f"PyTorchJob {namespace}/{name} successfully completed.",
                    )
                elif running > 0:
                    set_condition(
                        status,
                        "Running",
                        "True",
                        "PyTorchJobRunning",
                        f"PyTorchJob {namespace}/{name} is running.",
                    )
            if failed > 0 and total > succeeded + running:
                if replicas[rtype].get("restartPolicy") != "Never":
                    message = (
                        f"PyTorchJob {name} is restarting because {failed} {rtype} "
                        "replica(s) failed."
                    )
                    self.api.record_event(
                        job, "Warning", "PyTorchJobRestarting", message, PYTORCH.controller
                    )
                    set_condition(status, "Restarting", "True", "PyTorchJobRestarting", message)
                else:
                    message = (
                        f"PyTorchJob {name} is failed because {failed} {rtype} replica(s) failed."
                    )
                    self.api.record_event(
                        job, "Normal", "PyTorchJobFailed", message, PYTORCH.controller
                    )
                    status.setdefault("completionTime", now())
                    set_condition(status, "Failed", "True", "PyTorchJobFailed", message)

    def _tf_status(self, job: Obj, spec: Obj, status: Obj, pods: list[Obj]) -> None:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        replicas = spec[TENSORFLOW.replicas_field]
        restarting = _condition(status, "Restarting")
        worker0 = "Worker" not in replicas or any(
            _type(p) == "worker"
            and p["metadata"]["labels"].get(LABEL_INDEX) == "0"
            and _phase(p) == "Succeeded"
            and _exit_code(p, TENSORFLOW.container) == 0
            for p in pods
        )
        chief = "Chief" in replicas or "Master" in replicas
        for rtype in TENSORFLOW.order:
            if rtype not in replicas:
                continue
            counts = status["replicaStatuses"][rtype]
            total = int(replicas[rtype].get("replicas", 1))
            running, succeeded = counts.get("active", 0), counts.get("succeeded", 0)
            failed = counts.get("failed", 0)
            done = f"TFJob {namespace}/{name} successfully completed."
            if chief and rtype in ("Chief", "Master"):
                if running > 0:
                    set_condition(
                        status,
                        "Running",
                        "True",
                        "TFJobRunning",
                        f"TFJob {namespace}/{name} is running.",
                    )
                if total - succeeded == 0:
                    self._succeed(TENSORFLOW, job, status, done)
            elif not chief and rtype == "Worker":
                all_workers = spec.get("successPolicy") == "AllWorkers"
                if total - succeeded == 0 or (worker0 and not all_workers):
                    self._succeed(TENSORFLOW, job, status, done)
                elif running > 0:
                    set_condition(
                        status,
                        "Running",
                        "True",
                        "TFJobRunning",
                        f"TFJob {namespace}/{name} is running.",
                    )
            if failed > 0:
                if restarting is not None:
                    set_condition(
                        status, "Restarting", "True", restarting["reason"], restarting["message"]
                    )
                elif not (spec.get("enableDynamicWorker") and rtype == "Worker"):
                    message = (
                        f"TFJob {namespace}/{name} has failed because {failed} {rtype} "
                        "replica(s) failed."
                    )
                    self.api.record_event(
                        job, "Normal", "TFJobFailed", message, TENSORFLOW.controller
                    )
                    status.setdefault("completionTime", now())
                    set_condition(status, "Failed", "True", "TFJobFailed", message)
