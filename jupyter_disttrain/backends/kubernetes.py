"""The Kubernetes backend: Kubeflow ``PyTorchJob``/``TFJob`` created and watched live.

Submit creates the payload ConfigMap (or Secret), then the job, then makes
the job the payload's owner so it is garbage-collected with it. Following a
job uses watches, never polling, and a fixed number of long-lived
connections whatever the worker count: one watch on the job, one on its
pods, one on Warning events, and one log stream for the pod of rank 0.
Failing pods' logs are read once when they end; other ranks' logs on demand.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from .. import events as ev
from ..payload import Payload, package_version
from ..runtime import rankprefix
from ..runtime.protocol import PREFIX
from ..spec import JobSpec
from . import manifests as mf
from .base import (
    Backend,
    BackendOption,
    Capabilities,
    EventSink,
    JobNotFound,
    JobRecord,
    Plan,
    Submission,
)
from .k8s_client import Connection, connect, explain
from .k8s_options import (
    EXAMPLES,
    REPEATABLE,
    STOCK_IMAGES,
    SWITCHES,
    ImagePolicy,
    K8sOptions,
    default_image,
    parse_options,
)
from .k8s_status import JOB_NAME_LABEL, job_condition, pod_facts, rank_events, warning_message

GROUP, VERSION = "kubeflow.org", "v1"
PLURALS = {"pytorch": ("pytorchjobs", "PyTorchJob"), "tensorflow": ("tfjobs", "TFJob")}
CONTAINERS = {"pytorch": "pytorch", "tensorflow": "tensorflow"}
WATCH_SECONDS = 60
DRAIN_SECONDS = 15.0
#: Warning reasons that explain a job that does not start.
PENDING_REASONS = frozenset({"FailedScheduling", "Failed", "BackOff", "FailedMount"})


def payload_files(payload: Payload) -> dict[str, bytes]:
    """What the pods need beside the image: payload, worker runtime, cloudpickle."""
    import cloudpickle

    from .. import runtime

    files = {mf.PAYLOAD_FILE: payload.data}
    package = Path(runtime.__file__).parent.parent
    files["jupyter_disttrain/__init__.py"] = (package / "__init__.py").read_bytes()
    for path in sorted((package / "runtime").glob("*.py")):
        if path.name != "zygote.py":  # the local launcher; pods run torchrun's own
            files[f"jupyter_disttrain/runtime/{path.name}"] = path.read_bytes()
    for path in sorted(Path(cloudpickle.__file__).parent.glob("*.py")):
        files[f"cloudpickle/{path.name}"] = path.read_bytes()
    return files


def notebook_versions(framework: str = "pytorch") -> dict[str, str]:
    """Versions the payload was made with (they pick the default image of ``framework``)."""
    out = {"python": platform.python_version()}
    if framework == "tensorflow":
        version = package_version("tensorflow") or package_version("tensorflow-cpu")
    else:
        version = package_version("torch")
    if version:
        out["tensorflow" if framework == "tensorflow" else "torch"] = version
    return out


@dataclass(frozen=True)
class KubernetesPlan(Plan):
    """The objects ``submit`` creates; ``str()`` is the YAML ``--dry-run`` prints."""

    spec: JobSpec
    payload: Payload
    objects: tuple[dict[str, Any], ...]
    namespace: str

    def __str__(self) -> str:
        return mf.render_yaml(self.objects)

    def export(self) -> str:
        """The YAML for ``kubectl create -f``."""
        return str(self)


class KubernetesRun(Submission):
    """Follows one job: watches translate to events; stop deletes the job."""

    def __init__(
        self, backend: KubernetesBackend, conn: Connection, spec: JobSpec, sink: EventSink
    ) -> None:
        self.backend = backend
        self.conn = conn
        self.spec = spec
        self.sink = sink
        self.name = spec.name
        self.plural, self.kind = PLURALS[spec.framework]
        self.container = CONTAINERS[spec.framework]
        self._done = threading.Event()
        self._stopping = threading.Event()
        self._stop_reason = ""
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, int, str]] = {}  # pod -> (state, restarts, reason)
        self._followed: dict[str, threading.Thread] = {}
        self._read_once: set[tuple[str, int]] = set()
        self._watches: list[watch.Watch] = []
        self._has_leader = True
        self._terminal: tuple[ev.JobState, str, str] | None = None
        self._state = ""
        self._pending_why: tuple[str, str] | None = None
        self._got_result = False
        self._errors: list[str] = []

    # -- Submission ------------------------------------------------------------
    def start(self) -> None:
        """Start the watches (each on its own daemon thread)."""
        for target in (self._watch_job, self._watch_pods, self._watch_warnings):
            threading.Thread(
                target=self._guard(target), daemon=True, name=f"distrain-k8s-{target.__name__}"
            ).start()
        if self.spec.timeout:
            threading.Thread(target=self._deadline, daemon=True).start()

    def stop(self, reason: str = "stopped by user") -> None:
        """Delete the job (foreground propagation): its pods and payload go with it."""
        if self._done.is_set() or self._stopping.is_set():
            return
        self._stop_reason = reason
        self._stopping.set()
        self.backend.delete(self.conn, self.spec.framework, self.name)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the terminal state."""
        return self._done.wait(timeout)

    # -- plumbing --------------------------------------------------------------
    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # report instead of dying silently
                if not self._done.is_set():
                    self.sink(
                        ev.Event(
                            "log",
                            None,
                            time.time(),
                            {"text": f"watch error: {exc!r}", "source": "kubernetes"},
                        )
                    )

        return run

    def _stream(
        self, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """Watch events until the job is done, re-opening after server time-outs."""
        version: str | None = None
        while not self._done.is_set():
            w = watch.Watch()
            self._watches.append(w)
            try:
                for item in w.stream(
                    func, *args, timeout_seconds=WATCH_SECONDS, resource_version=version, **kwargs
                ):
                    obj = item["object"]
                    data = self.conn.plain(obj)
                    version = data.get("metadata", {}).get("resourceVersion") or version
                    yield {"type": item["type"], "object": data}
                    if self._done.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:  # too old: start over from now
                    version = None
                    continue
                raise
            finally:
                self._watches.remove(w)

    def _watch_job(self) -> None:
        last: tuple[ev.JobState, str, str] | None = None
        for item in self._stream(
            self.conn.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.conn.namespace,
            self.plural,
            field_selector=f"metadata.name={self.name}",
        ):
            if item["type"] == "DELETED":
                if self._stopping.is_set():
                    self._finish(("Stopped", "Stopped", self._stop_reason))
                else:
                    self._finish(("Failed", "Deleted", f"the {self.kind} was deleted"))
                return
            specs = (
                item["object"]
                .get("spec", {})
                .get(
                    "pytorchReplicaSpecs" if self.spec.framework == "pytorch" else "tfReplicaSpecs",
                    {},
                )
            )
            self._has_leader = bool({"Master", "Chief"} & set(specs))
            current = job_condition(item["object"])
            if current is None or current == last:
                continue
            last = current
            self._state = current[0]
            if current[0] == "Pending" and self._pending_why:  # keep the known cause
                current = ("Pending", *self._pending_why)
            if current[0] in ev.TERMINAL_STATES:
                self._finish(current)
                return
            self.sink(ev.job_event(*current))

    def _watch_pods(self) -> None:
        for item in self._stream(
            self.conn.core.list_namespaced_pod,
            self.conn.namespace,
            label_selector=f"{JOB_NAME_LABEL}={self.name}",
        ):
            if item["type"] == "DELETED":
                continue
            facts = pod_facts(item["object"], self.container, self._has_leader)
            key = (facts.state, facts.restarts, facts.reason)
            with self._lock:
                previous = self._pods.get(facts.name)
                self._pods[facts.name] = key
            if previous is not None and previous[1] < facts.restarts:
                self.sink(ev.restart_event(facts.restarts, f"{facts.name} restarted"))
            if previous != key:
                for event in rank_events(facts, self.spec.nproc):
                    self.sink(event)
            if facts.node == 0 and facts.started:
                self._follow(facts.name, facts.restarts)
            elif facts.state == "Failed":
                self._read_log_once(facts.name, facts.restarts)

    def _watch_warnings(self) -> None:
        prefix = f"{self.name}-"
        for item in self._stream(
            self.conn.core.list_namespaced_event, self.conn.namespace, field_selector="type=Warning"
        ):
            involved = str((item["object"].get("involvedObject") or {}).get("name", ""))
            if involved != self.name and not involved.startswith(prefix):
                continue
            text = warning_message(item["object"])
            self.sink(ev.Event("log", None, time.time(), {"text": text, "source": "kubernetes"}))
            reason = str(item["object"].get("reason"))
            if reason in PENDING_REASONS and self._state in ("", "Pending"):
                self._pending_why = (reason, text)
                self.sink(ev.job_event("Pending", reason, text))  # why it does not start

    def _follow(self, pod: str, restarts: int) -> None:
        key = f"{pod}#{restarts}"
        with self._lock:
            if key in self._followed:
                return
            thread = threading.Thread(
                target=self._guard(lambda: self._pump(pod, True)),
                daemon=True,
                name=f"distrain-log-{pod}",
            )
            self._followed[key] = thread
        thread.start()

    def _read_log_once(self, pod: str, restarts: int) -> None:
        with self._lock:
            if (pod, restarts) in self._read_once or any(
                k.startswith(pod + "#") for k in self._followed
            ):
                return
            self._read_once.add((pod, restarts))
        threading.Thread(target=self._guard(lambda: self._pump(pod, False)), daemon=True).start()

    def _pump(self, pod: str, follow: bool) -> None:
        for line in self.backend.stream_log(self.conn, pod, self.container, follow=follow):
            event = parse_pod_line(line, pod)
            if event.kind == "result":
                self._got_result = True
            self.sink(event)

    def _deadline(self) -> None:
        assert self.spec.timeout is not None
        if self._done.wait(self.spec.timeout + 5):
            return
        self._stop_reason = f"did not finish within {self.spec.timeout:g} s"
        self._stopping.set()
        self.backend.delete(self.conn, self.spec.framework, self.name)
        self._finish(("Failed", "Timeout", self._stop_reason))

    def _finish(self, outcome: tuple[ev.JobState, str, str]) -> None:
        with self._lock:
            if self._terminal is not None:
                return
            self._terminal = outcome
            followers = list(self._followed.values())
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in followers:  # let rank 0's log deliver its last lines (the result)
            thread.join(max(0.0, deadline - time.monotonic()))
        if outcome[0] == "Succeeded":  # and the other pods report how they ended
            while time.monotonic() < deadline and not self._pods_ended():
                time.sleep(0.05)
            if not self._got_result:  # an elastic restart moved rank 0 to another pod
                with self._lock:
                    followed = {key.split("#")[0] for key in self._followed}
                    others = sorted(set(self._pods) - followed)
                for pod in others:
                    self._pump(pod, follow=False)
        self.sink(ev.job_event(*outcome))
        self._done.set()
        for w in list(self._watches):
            w.stop()

    def _pods_ended(self) -> bool:
        with self._lock:
            states = [state for state, _, _ in self._pods.values()]
        return len(states) >= self.spec.nodes and all(s in ("Succeeded", "Failed") for s in states)


def parse_pod_line(line: str, pod: str) -> ev.Event:
    """One pod log line -> an event attributed to its rank (``[rank R]`` prefix)."""
    rank, text = rankprefix.split(line)
    event = ev.parse_line(text, rank)
    if rank is None and event.kind == "log":
        event.fields["source"] = pod
    return event


class KubernetesBackend(Backend):
    """Kubeflow Training Operator jobs on the cluster of a kubeconfig context."""

    name = "kubernetes"
    capabilities = Capabilities(
        has_pods=True,
        survives_kernel=True,
        elastic=True,
        frameworks=frozenset({"pytorch", "tensorflow"}),
        restart_frameworks=frozenset({"pytorch", "tensorflow"}),
        renders_manifests=True,
        needs_configuration=True,
    )
    options = tuple(
        BackendOption(
            key,
            f"kubernetes: e.g. {example}",
            repeatable=key in REPEATABLE,
            switch=key in SWITCHES,
        )
        for key, example in EXAMPLES.items()
    )

    @classmethod
    def configured(cls) -> bool:
        """True when a kubeconfig file exists or this process runs in a pod."""
        first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        if Path(os.path.expanduser(first or "~/.kube/config")).is_file():
            return True
        token = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
        return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and token.is_file()

    def __init__(
        self,
        context: str | None = None,
        namespace: str | None = None,
        images: ImagePolicy = STOCK_IMAGES,
        notebook: str | None = None,
    ) -> None:
        self.context = context
        self.namespace = namespace
        self.images = images
        self.notebook = notebook
        self._conn: Connection | None = None

    # -- helpers -----------------------------------------------------------------
    def settings(self, spec: JobSpec) -> K8sOptions:
        """The spec's Kubernetes options, validated."""
        return parse_options(spec.options)

    def connection(self, opts: K8sOptions | None = None) -> Connection:
        """The API connection for these options (cached for the defaults)."""
        context = (opts.context if opts else None) or self.context
        namespace = (opts.namespace if opts else None) or self.namespace
        if self._conn is not None and (context, namespace) == (self.context, self.namespace):
            return self._conn
        conn = connect(context, namespace)
        if (context, namespace) == (self.context, self.namespace):
            self._conn = conn
        return conn

    def payload_extra(self, spec: JobSpec) -> dict[str, Any]:
        """The image that matches the notebook's versions, named if a worker's Python differs."""
        opts = self.settings(spec)
        image = opts.image or default_image(spec.framework, notebook_versions(spec.framework),
                                            gpus=opts.gpus, policy=self.images)  # fmt: skip
        return {"image_hint": f"image {image}"}

    def objects(self, spec: JobSpec, payload: Payload) -> list[dict[str, Any]]:
        """The payload object and the job (pure; raises before anything is created)."""
        opts = self.settings(spec)
        return mf.manifests(
            spec,
            opts,
            payload_files(payload),
            notebook_versions(spec.framework),
            notebook=self.notebook,
            images=self.images,
        )

    def delete(self, conn: Connection, framework: str, name: str) -> bool:
        """Delete a job and its payload; False when it did not exist."""
        plural, kind = PLURALS[framework]
        try:
            conn.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                conn.namespace,
                plural,
                name,
                propagation_policy="Foreground",
            )
            found = True
        except ApiException as exc:
            if exc.status != 404:
                raise explain(exc, kind=kind, name=name, namespace=conn.namespace) from None
            found = False
        for remove in (conn.core.delete_namespaced_config_map, conn.core.delete_namespaced_secret):
            try:
                remove(mf.payload_name(name), conn.namespace)
            except ApiException:
                pass
        return found

    def stream_log(
        self, conn: Connection, pod: str, container: str, *, follow: bool, tail: int | None = None
    ) -> Iterator[str]:
        """Lines of a pod's log (following it until the container ends when ``follow``)."""
        try:
            resp: Any = conn.core.read_namespaced_pod_log(
                pod,
                conn.namespace,
                container=container,
                follow=follow,
                tail_lines=tail,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet / gone
                return
            raise explain(exc, kind="Pod", name=pod, namespace=conn.namespace) from None
        pending = b""
        try:
            for chunk in resp.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    yield raw.decode("utf-8", "replace")
            if pending:
                yield pending.decode("utf-8", "replace")
        finally:
            resp.release_conn()

    # -- Backend -----------------------------------------------------------------
    def plan(self, spec: JobSpec, payload: Payload) -> KubernetesPlan:
        """The exact objects, as YAML; nothing is sent to the cluster."""
        objs = self.objects(spec, payload)
        namespace = self.settings(spec).namespace or "<context namespace>"
        return KubernetesPlan(spec, payload, tuple(objs), namespace)

    def submit(self, plan: Plan, sink: EventSink) -> KubernetesRun:
        """Create payload and job, own the payload by the job, start following."""
        if not isinstance(plan, KubernetesPlan):
            raise TypeError(
                f"the kubernetes backend runs KubernetesPlans, not {type(plan).__name__}"
            )
        spec = plan.spec
        opts = self.settings(spec)
        payload_obj, job_obj = plan.objects
        conn = self.connection(opts)
        plural, kind = PLURALS[spec.framework]
        core = conn.core
        ns = conn.namespace
        create_payload = (
            core.create_namespaced_secret
            if opts.payload_secret
            else core.create_namespaced_config_map
        )
        try:
            create_payload(ns, cast(Any, payload_obj))
        except ApiException as exc:
            raise explain(
                exc, kind=payload_obj["kind"], name=payload_obj["metadata"]["name"], namespace=ns
            ) from None
        try:
            created: Any = conn.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, plural, job_obj
            )
        except ApiException as exc:
            try:  # leave nothing behind
                (
                    core.delete_namespaced_secret
                    if opts.payload_secret
                    else core.delete_namespaced_config_map
                )(payload_obj["metadata"]["name"], ns)
            except ApiException:
                pass
            raise explain(exc, kind=kind, name=spec.name, namespace=ns) from None
        owner = {"metadata": {"ownerReferences": [mf.owner_reference(created)]}}
        patch = (
            core.patch_namespaced_secret
            if opts.payload_secret
            else (core.patch_namespaced_config_map)
        )
        try:
            patch(payload_obj["metadata"]["name"], ns, owner)
        except ApiException as exc:
            raise explain(
                exc, kind=payload_obj["kind"], name=payload_obj["metadata"]["name"], namespace=ns
            ) from None
        sink(ev.job_event("Pending", "Created", f"{kind} {ns}/{spec.name} created"))
        run = KubernetesRun(self, conn, spec, sink)
        run.start()
        return run

    def attach(self, name: str, sink: EventSink) -> tuple[JobSpec, KubernetesRun]:
        """Follow an existing job from the start of its logs (after a kernel restart)."""
        conn = self.connection()
        for framework, (plural, kind) in PLURALS.items():
            try:
                obj = conn.custom.get_namespaced_custom_object(
                    GROUP, VERSION, conn.namespace, plural, name
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise explain(exc, kind=kind, name=name, namespace=conn.namespace) from None
            spec = spec_from_object(conn.plain(obj), framework)
            run = KubernetesRun(self, conn, spec, sink)
            run.start()
            return spec, run
        raise JobNotFound(f"no job named {name!r} in namespace {conn.namespace!r}")

    def list_jobs(self) -> list[JobRecord]:
        """Jobs this tool created in the namespace (by label), newest first."""
        conn = self.connection()
        out: list[JobRecord] = []
        for framework, (plural, kind) in PLURALS.items():
            try:
                listing: Any = conn.custom.list_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    conn.namespace,
                    plural,
                    label_selector=f"{mf.LABEL_MANAGED_BY}={mf.MANAGED_BY}",
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise explain(exc, kind=kind, name="*", namespace=conn.namespace) from None
            for obj in listing.get("items", []):
                out.append(record_from_object(obj, framework))
        return sorted(out, key=lambda r: -r.created)

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        """Pod logs of the job (one rank's lines, or all with their rank)."""
        conn = self.connection()
        pods: Any = conn.core.list_namespaced_pod(
            conn.namespace, label_selector=f"{JOB_NAME_LABEL}={name}"
        )
        if not pods.items:
            raise JobNotFound(f"job {name!r} has no pods in namespace {conn.namespace!r}")
        lines: list[str] = []
        for pod in sorted(pods.items, key=lambda p: str(p.metadata.name)):
            container = "tensorflow" if "tfjob" in str(pod.metadata.labels) else "pytorch"
            names = [c.name for c in pod.spec.containers]
            container = container if container in names else names[0]
            for line in self.stream_log(conn, pod.metadata.name, container, follow=False):
                got, text = rankprefix.split(line)
                if PREFIX in text:
                    continue
                if rank is None:
                    lines.append(line if got is not None else f"[{pod.metadata.name}] {line}")
                elif got == rank:
                    lines.append(text)
        return "\n".join(lines if tail is None else lines[-tail:] if tail > 0 else [])

    def stop(self, name: str) -> bool:
        """Delete job ``name`` (either framework)."""
        conn = self.connection()
        return any(self.delete(conn, fw, name) for fw in PLURALS)


def spec_from_object(obj: dict[str, Any], framework: str) -> JobSpec:
    """A JobSpec describing an existing job (for attaching to it)."""
    spec = obj.get("spec", {})
    replicas = spec.get("pytorchReplicaSpecs") or spec.get("tfReplicaSpecs") or {}
    nodes = sum(int(r.get("replicas", 1)) for r in replicas.values()) or 1
    nproc = spec.get("nprocPerNode") or (spec.get("elasticPolicy") or {}).get("nProcPerNode") or 1
    try:
        nproc = int(nproc)
    except (TypeError, ValueError):
        nproc = 1
    return JobSpec(
        name=str(obj["metadata"]["name"]),
        nodes=nodes,
        nproc=nproc,
        backend="kubernetes",
        framework=cast(Any, framework),
    )


def record_from_object(obj: dict[str, Any], framework: str) -> JobRecord:
    """A job listing row from a custom object."""
    spec = spec_from_object(obj, framework)
    state = job_condition(obj)
    meta = obj.get("metadata", {})
    created = _timestamp(meta.get("creationTimestamp"))
    ended = _timestamp((obj.get("status") or {}).get("completionTime"))
    return JobRecord(
        name=spec.name,
        backend="kubernetes",
        state=state[0] if state else "Pending",
        world_size=spec.world_size,
        nodes=spec.nodes,
        nproc=spec.nproc,
        created=created or 0.0,
        ended=ended,
        reason=state[2] if state else "",
        owner=str(meta.get("namespace", "")),
        extra={"notebook": notebook} if (notebook := notebook_annotation(meta)) else {},
    )


def notebook_annotation(meta: dict[str, Any]) -> str:
    """The notebook that created the job, from its annotation ("" when absent)."""
    return str((meta.get("annotations") or {}).get(mf.ANNOTATION_NOTEBOOK) or "")


def _timestamp(text: Any) -> float | None:
    if not text:
        return None
    import datetime

    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
