"""The Kubernetes backend: Kubeflow jobs (:mod:`.kinds`) created and watched live.

Submit creates the payload ConfigMap (or Secret), then the job, then makes
the job the payload's owner so it is garbage-collected with it. Following a
job uses watches, never polling, and a fixed number of long-lived
connections whatever the worker count: one watch on the job, one on its
pods, one on Warning events, and one log stream for the pod of rank 0.
Failing pods' logs are read once when they end; other ranks' logs on demand.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ... import events as ev
from ...frameworks import framework
from ...payload import Payload
from ...runtime import control as controls
from ...runtime import jobkey, warm
from ...runtime.hangwatch import WHERE_ANNOTATION
from ...spec import JobSpec
from ..base import (
    Backend,
    BackendError,
    BackendOption,
    Capabilities,
    EventSink,
    JobNotFound,
    JobRecord,
    Plan,
    RuntimeRecord,
)
from ..home import views_root
from . import access, kinds, podlogs
from .attached import create_owned
from .client import Connection, api_error, connect, explain
from .images import STOCK_IMAGES, ImagePolicy, default_image, notebook_versions
from .kinds import KubeflowKind, kind_of
from .manifests import manifests
from .namespace_watch import NamespaceWatch
from .option_parsing import parse_options
from .options import (
    EXAMPLES,
    OPTIONAL_VALUE,
    REPEATABLE,
    SWITCHES,
    K8sOptions,
)
from .podfiles import payload_files
from .portforward import connect_job, leader_pod, node_pod
from .records import namespace_record, record_from_object, spec_from_object
from .template import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    owner_reference,
    payload_name,
)
from .watch import KubernetesRun
from .yaml import render_yaml

#: Seconds ``submit`` waits for an earlier job of the same name to finish being deleted.
DELETION_WAIT = 120.0


@dataclass(frozen=True)
class KubernetesPlan(Plan):
    """The objects ``submit`` creates; ``str()`` is the YAML ``--dry-run`` prints (the job
    key a placeholder), :meth:`export` the file for ``kubectl create -f`` (the key in it)."""

    spec: JobSpec
    payload: Payload
    objects: tuple[dict[str, Any], ...]
    namespace: str

    def __str__(self) -> str:
        return render_yaml(self.objects, show_key=False)

    def export(self) -> str:
        """The YAML for ``kubectl create -f``, with the job key."""
        return render_yaml(self.objects)


class KubernetesBackend(Backend):
    """Kubeflow Training Operator jobs on the cluster of a kubeconfig context."""

    name = "kubernetes"
    capabilities = Capabilities(
        remote_workers=True,
        survives_kernel=True,
        elastic=True,
        frameworks=kinds.frameworks(),
        restart_frameworks=kinds.frameworks(),
        exports_plans=True,
        needs_setup=True,
        phases=ev.PHASES,
    )
    options = tuple(
        BackendOption(
            key,
            f"kubernetes: e.g. {example}",
            repeatable=key in REPEATABLE,
            switch=key in SWITCHES,
            optional=key in OPTIONAL_VALUE,
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
        self._namespace: NamespaceWatch | None = None  # see watch_namespace()
        self._job_conns: dict[str, Connection] = {}  # see job_connection()

    # -- helpers -----------------------------------------------------------------
    def job_connection(self, name: str) -> Connection:
        """The connection of job ``name`` as this backend submitted it (its spec may choose
        another context or namespace), else the default one: what by-name calls use."""
        return self._job_conns.get(name) or self.connection()

    def settings(self, spec: JobSpec) -> K8sOptions:
        """The spec's Kubernetes options, validated; the payload (with the job key) in a Secret."""
        opts = parse_options(spec.options)
        runtime = kind_of(spec.framework, opts.kubeflow_api).default_runtime(spec.framework)
        if runtime and "runtime" not in dict(spec.options):  # JAX: jax-distributed
            opts = dataclasses.replace(opts, runtime=runtime)
        if not opts.payload_secret:
            opts = dataclasses.replace(opts, payload_secret=True)
        return opts

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
        if not opts.image and not framework(spec.framework).image:
            return {}  # the training runtime's own image (JAX: jax-distributed's)
        image = opts.image or default_image(
            spec.framework, notebook_versions(spec.framework), gpus=opts.gpus, policy=self.images
        )
        return {"image_hint": f"image {image}"}

    def objects(
        self, spec: JobSpec, payload: Payload, runtime_kind: str = ""
    ) -> list[dict[str, Any]]:
        """The payload object, the job and its extras (pure; raises before anything is
        created). The job's kind follows the spec's framework and ``kubeflow_api``;
        ``runtime_kind`` is what the kind said of its training runtime (see :meth:`resolve_api`).
        """
        opts = self.settings(spec)
        files = payload_files(payload)
        versions = notebook_versions(spec.framework)
        return manifests(
            spec,
            opts,
            files,
            versions,
            notebook=self.notebook,
            images=self.images,
            script=payload.script is not None,
            runtime_kind=runtime_kind,
            warm=warm.chosen(payload.packages),
        )

    # -- Kubeflow APIs and training runtimes ---------------------------------------
    def served_apis(self, conn: Connection) -> set[str]:
        """The API groups the cluster serves (discovery)."""
        from kubernetes import client

        groups: Any = client.ApisApi(conn.api).get_api_versions(_request_timeout=10)
        return {str(g.name) for g in groups.groups or []}

    def resolve_api(self, spec: JobSpec) -> tuple[JobSpec, str]:
        """The spec with its Kubeflow kind decided, and what that kind says of its runtime.

        ``--kubeflow-api`` forces one (the kind it names refuses what it cannot
        carry); otherwise, when several kinds run the framework, the cluster's
        discovery decides (the first kind of the table whose API group is
        served), and without a cluster to ask (render, export) it is the first.
        """
        opts = self.settings(spec)
        candidates = kinds.running(spec.framework)
        named = kinds.by_api(opts.kubeflow_api) if opts.kubeflow_api else None
        if named is not None:
            named.refuse(spec, opts)  # names the fix
        kind = kind_of(spec.framework, opts.kubeflow_api)
        conn: Connection | None = None
        if self.configured():
            try:
                conn = self.connection(opts)
            except Exception:
                conn = None
        if named is None and len(candidates) > 1:
            kind = candidates[0]
            if conn is not None:
                try:
                    served = self.served_apis(conn)
                except Exception:
                    served = {kind.group}  # unreachable: the current API
                found = [k for k in candidates if k.group in served]
                kind = found[0] if found else kind_of(spec.framework, None)
            if kind.api:
                spec = spec.with_(options=(*spec.options, ("kubeflow_api", kind.api)))
        if kind is not named:
            kind.refuse(spec, opts)
        return spec, kind.runtime_kind(conn, opts)

    def runtimes(self) -> list[RuntimeRecord]:
        """The training runtimes the cluster offers its kinds: name, framework, image, nodes."""
        conn = self.connection()
        return [r for k in kinds.KINDS for r in k.runtimes(conn, missing_ok=True)]

    def delete(self, conn: Connection, kind: KubeflowKind, name: str) -> bool:
        """Delete a job and its payload; False when it did not exist."""
        try:
            conn.custom.delete_namespaced_custom_object(
                kind.group,
                kind.version,
                conn.namespace,
                kind.plural,
                name,
                propagation_policy="Foreground",
            )
            found = True
        except api_error() as exc:
            if exc.status != 404:
                raise explain(
                    exc,
                    kind=kind.kind,
                    name=name,
                    namespace=conn.namespace,
                    unserved=kind.unserved(),
                ) from None
            found = False
        for remove in (conn.core.delete_namespaced_config_map, conn.core.delete_namespaced_secret):
            try:
                remove(payload_name(name), conn.namespace)
            except api_error():
                pass
        return found

    def await_deletion(
        self, conn: Connection, kind: KubeflowKind, name: str, timeout: float = DELETION_WAIT
    ) -> None:
        """Wait while a job of that name is being deleted (its pods ending), so the name is free
        again (a session restarted, a job stopped and run again); return at once otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                obj: Any = conn.custom.get_namespaced_custom_object(
                    kind.group, kind.version, conn.namespace, kind.plural, name
                )
            except api_error():
                return  # gone (or unreadable: creating it says why)
            if not (obj.get("metadata") or {}).get("deletionTimestamp"):
                return
            time.sleep(0.2)

    #: Lines of a pod's log (:func:`.podlogs.stream_log`), for the follower (``watch.Cluster``).
    stream_log = staticmethod(podlogs.stream_log)

    # -- Backend -----------------------------------------------------------------
    def plan(self, spec: JobSpec, payload: Payload) -> KubernetesPlan:
        """The exact objects, as YAML; nothing is created (discovery may be asked)."""
        spec, runtime_kind = self.resolve_api(spec)
        objs = self.objects(spec, payload, runtime_kind)
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
        payload_obj, job_obj, *attached = plan.objects
        conn = self.connection(opts)
        kubeflow = kind_of(spec.framework, opts.kubeflow_api)
        plural, kind = kubeflow.plural, kubeflow.kind
        core = conn.core
        ns = conn.namespace
        self.await_deletion(conn, kubeflow, spec.name)
        try:  # a Secret (see settings): it holds the job key
            core.create_namespaced_secret(ns, cast(Any, payload_obj))
        except api_error() as exc:
            raise explain(
                exc, kind=payload_obj["kind"], name=payload_obj["metadata"]["name"], namespace=ns
            ) from None
        try:
            created: Any = conn.custom.create_namespaced_custom_object(
                kubeflow.group, kubeflow.version, ns, plural, job_obj
            )
        except api_error() as exc:
            try:  # leave nothing behind
                core.delete_namespaced_secret(payload_obj["metadata"]["name"], ns)
            except api_error():
                pass
            raise explain(
                exc, kind=kind, name=spec.name, namespace=ns, unserved=kubeflow.unserved()
            ) from None
        owner = {"metadata": {"ownerReferences": [owner_reference(created)]}}
        try:
            core.patch_namespaced_secret(payload_obj["metadata"]["name"], ns, owner)
        except api_error() as exc:
            raise explain(
                exc, kind=payload_obj["kind"], name=payload_obj["metadata"]["name"], namespace=ns
            ) from None
        sink(ev.job_event("Pending", "Created", f"{kind} {ns}/{spec.name} created"))
        for warning in create_owned(conn, attached, conn.plain(created)):
            sink(
                ev.Event(
                    "log",
                    None,
                    time.time(),
                    {"text": f"warning: {warning}", "source": "kubernetes"},
                )
            )
        self._job_conns[spec.name] = conn
        run = KubernetesRun(self, conn, spec, sink, plan.payload.key)
        run.start()
        return run

    def job_key(self, conn: Connection, name: str, sink: EventSink | None = None) -> bytes | None:
        """Job ``name``'s key from its payload Secret; None (and a log line) when unreadable."""
        why = ""
        try:
            secret: Any = conn.core.read_namespaced_secret(payload_name(name), conn.namespace)
            data = (secret.data or {}).get(jobkey.KEY_FILE)
            key = base64.b64decode(data) if data else b""
            if len(key) == jobkey.KEY_BYTES:
                return key
            why = "its payload Secret holds no job key"
        except api_error() as exc:
            why = f"its payload Secret is not readable ({exc.status} {exc.reason})"
        if sink is not None:
            sink(
                ev.Event(
                    "log",
                    None,
                    time.time(),
                    {
                        "text": f"job {name!r}: {why}; worker lines are shown as log text only",
                        "source": "kubernetes",
                    },
                )
            )
        return None

    def attach(self, name: str, sink: EventSink) -> tuple[JobSpec, KubernetesRun]:
        """Follow an existing job from the start of its logs (after a kernel restart)."""
        conn = self.connection()
        found = podlogs.job_object(conn, name)
        if found is None:
            raise JobNotFound(f"no job named {name!r} in namespace {conn.namespace!r}")
        spec = spec_from_object(found[1], found[0])
        key = self.job_key(conn, name, sink)
        run = KubernetesRun(self, conn, spec, sink, key)
        run.start()
        return spec, run

    def list_jobs(self) -> list[JobRecord]:
        """Jobs this tool created in the namespace (by label), newest first."""
        conn = self.connection()
        mine = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        out = [
            record_from_object(obj, kubeflow)
            for kubeflow, obj in listed_objects(conn, label_selector=mine)
        ]
        return sorted(out, key=lambda r: -r.created)

    def watch_namespace(self) -> Callable[[], None] | None:
        """Follow the namespace's jobs with one watch per kind (:mod:`.namespace_watch`)."""
        if self._namespace is None:
            self._namespace = NamespaceWatch(self.connection()).start()
        return self._close_namespace

    def _close_namespace(self) -> None:
        found, self._namespace = self._namespace, None
        if found is not None:
            found.close()

    def list_namespace(self) -> list[JobRecord]:
        """Every job of every served kind in the namespace, whoever started it, newest first
        (from the namespace watch once it has listed every kind)."""
        cached = self._namespace.records() if self._namespace is not None else None
        if cached is not None:
            return cached
        conn = self.connection()
        out = [namespace_record(obj, kubeflow) for kubeflow, obj in listed_objects(conn)]
        return sorted(out, key=lambda r: -r.created)

    def may_stop(self, name: str) -> bool | None:
        """Whether RBAC lets this user delete job ``name`` (a SelfSubjectAccessReview)."""
        return access.may_delete(self.job_connection(name), name)

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        """Pod logs of the job (one rank's lines, or all with their rank), control lines left out.

        A failed job's pods are gone once its logs were kept (see
        :meth:`~.watch.KubernetesRun`): those are read from its record. A rank's
        signed error shows as its traceback (:func:`.podlogs.rank_lines`).
        """
        conn = self.job_connection(name)
        texts = podlogs.job_texts(conn, name)
        if texts is None:
            raise JobNotFound(f"job {name!r} has no pods in namespace {conn.namespace!r}")
        # no object left to read the shape from: control lines still go, rank 0's error shows
        key, shape = self.job_key(conn, name), podlogs.job_shape(conn, name) or (1, 1)
        trust = None if key is None else ev.Trust.of(key, *shape)
        return podlogs.rank_lines(texts, trust, rank, tail)

    def request_stacks(self, name: str) -> str:
        """Raise the request counter annotation on the pod of node 0.

        The kubelet writes the pod's annotations into its downward-API file,
        where rank 0's watch reads them (on a real cluster within the
        kubelet's sync period, up to about a minute).
        """
        return f"a{self._annotate_leader(name, WHERE_ANNOTATION, str)}"

    def send_control(self, name: str, control: str, body: str) -> int:
        """Annotate the pod of node 0 with the next request of ``control`` (read as for
        :meth:`request_stacks`)."""
        key = self.job_key(self.job_connection(name), name)
        if key is None:
            raise BackendError(f"job {name!r}: its job key is not readable to sign a request with")
        return self._annotate_leader(
            name, controls.annotation(control), lambda n: controls.render(n, body, key)
        )

    def _annotate_leader(self, name: str, key: str, render: Callable[[int], str]) -> int:
        """Set annotation ``key`` of job ``name``'s node-0 pod to ``render(N)``, N one more
        than the number it holds; return N."""
        conn = self.job_connection(name)
        first = leader_pod([conn.plain(p) for p in podlogs.job_pods(conn, name)])
        if first is None:
            raise JobNotFound(f"job {name!r} has no pod of node 0 in namespace {conn.namespace!r}")
        meta = first["metadata"]
        asked = controls.number_of(str((meta.get("annotations") or {}).get(key, ""))) + 1
        patch = {"metadata": {"annotations": {key: render(asked)}}}
        try:
            conn.core.patch_namespaced_pod(meta["name"], conn.namespace, patch)
        except api_error() as exc:
            raise explain(exc, kind="Pod", name=meta["name"], namespace=conn.namespace) from None
        return asked

    def job_record(self, spec: JobSpec, state: str) -> JobRecord:
        """The base record with the job's namespace as ``owner`` (as listings give it) and
        its ``--context`` in ``extra``."""
        opts = self.settings(spec)
        record = super().job_record(spec, state)
        extra = {**record.extra, **({"context": opts.context} if opts.context else {})}
        namespace = opts.namespace or self.connection(opts).namespace
        return dataclasses.replace(record, owner=namespace, extra=extra)

    def record_connection(self, record: JobRecord) -> Connection:
        """The connection to the context and namespace a job's record names."""
        conn = self.connection()
        context = str(record.extra.get("context") or "") or None
        if context is not None and context != conn.context:
            return connect(context, record.owner or conn.namespace)
        if record.owner and record.owner != conn.namespace:
            return Connection(conn.api, record.owner, conn.context)
        return conn

    def connect(self, record: JobRecord, port: int, timeout: float = 60.0) -> socket.socket:
        """A socket to ``port`` of rank 0's pod through the API server's port-forward.

        Works from outside the cluster; see :mod:`.portforward`.
        """
        return self.connect_pod(record, port, timeout, leader_pod)

    def connect_rank(
        self, record: JobRecord, node: int, port: int, timeout: float = 30.0
    ) -> socket.socket:
        """A socket to ``port`` of node ``node``'s pod through the API server's port-forward."""
        return self.connect_pod(record, port, timeout, lambda pods: node_pod(pods, node))

    def connect_pod(
        self,
        record: JobRecord,
        port: int,
        timeout: float,
        pick: Callable[[list[dict[str, Any]]], dict[str, Any] | None],
    ) -> socket.socket:
        """A socket to ``port`` of the job's pod that ``pick`` chooses (port-forward)."""
        conn = self.record_connection(record)
        return connect_job(
            conn,
            record.name,
            port,
            timeout,
            lambda: [conn.plain(p) for p in podlogs.job_pods(conn, record.name)],
            pick,
        )

    def stored_key(self, name: str) -> bytes | None:
        """Job ``name``'s key from its payload Secret (None when unreadable)."""
        return self.job_key(self.job_connection(name), name)

    def view_directory(self, name: str, spec: JobSpec | None = None) -> str:
        """Where the view record of job ``name`` followed here goes: a directory of this
        user's, one per API server and namespace (``spec``'s options may choose them)."""
        conn = self.connection(self.settings(spec) if spec is not None else None)
        server = hashlib.sha256(str(conn.api.configuration.host).encode()).hexdigest()[:16]
        return str(views_root(self.name) / server / conn.namespace / name)

    def stop(self, name: str) -> bool:
        """Delete job ``name`` (of whichever kind it is)."""
        conn = self.job_connection(name)
        return any(self.delete(conn, kubeflow, name) for kubeflow in kinds.KINDS)


def listed_objects(conn: Connection, **selectors: str) -> Iterator[tuple[KubeflowKind, Any]]:
    """Every object of every Kubeflow kind the cluster serves in the namespace (``selectors``:
    the list call's ``label_selector``/``field_selector``), with its kind; a kind the cluster
    does not serve is skipped, any other refusal explained."""
    for kubeflow in kinds.KINDS:
        try:
            listing: Any = conn.custom.list_namespaced_custom_object(
                kubeflow.group, kubeflow.version, conn.namespace, kubeflow.plural, **selectors
            )
        except api_error() as exc:
            if exc.status == 404:  # the cluster does not serve this Kubeflow API
                continue
            raise explain(
                exc,
                kind=kubeflow.kind,
                name="*",
                namespace=conn.namespace,
                unserved=kubeflow.unserved(),
            ) from None
        for obj in listing.get("items", []):
            yield kubeflow, obj
