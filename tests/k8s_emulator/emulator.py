"""The :class:`Emulator`: API server, training operator and kubelet on 127.0.0.1."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import tornado.netutil
import yaml

from . import procs
from .apiserver import ApiServer
from .batchjob import JobController, default_job, job_rules
from .describe import describe as describe_state
from .describe import track
from .discovery import discovery_document
from .faults import DEFAULT_USER, INSUFFICIENT_GPU, Faults
from .jobset import default_jobset
from .jobset_controller import JobSetController
from .kubeflow import FRAMEWORKS
from .kubelet import Kubelet, KubeletSettings
from .kueue import Kueue
from .loop import ControlLoop
from .meta import Obj, deep, new_uid, now
from .netfaults import NetFaults
from .operator import Operator
from .podnet import PodNetwork, Relay
from .podnet import choose as choose_network
from .resources import (
    CORE,
    CRDS,
    DEFAULT_CRDS,
    JOBS,
    JOBSETS,
    PODS,
    SERVICES,
    TRAINER_CRDS,
    Registry,
    Resource,
    crd_resources,
    load_crd,
)
from .rewrite import Network
from .server import CountingHTTPServer, make_app
from .stats import Accounting, Stats
from .store import Store
from .trainer import API_VERSION as TRAINER_API_VERSION
from .trainer import TrainerKinds
from .trainer_status import NAMESPACE as STATUS_NAMESPACE
from .trainer_status import SERVICE as STATUS_SERVICE
from .trainer_status import StatusServer, with_trainer_status
from .trainer_webhooks import TrainerWebhooks, trainjob_rules
from .trainjob import TrainJobController, default_runtime, jax_runtime

#: What ``Emulator(apis=...)`` can serve: the Training Operator v1 and Kubeflow Trainer v2.
APIS = ("kubeflow-v1", "trainer")


class Emulator:
    """A Kubernetes API server with the Training Operator and a kubelet, for tests.

    ``with Emulator() as emu:`` starts it on a free port of 127.0.0.1 (its own
    IOLoop thread); leaving the block stops it and kills every process its
    pods started. Options: ``token`` (require ``Authorization: Bearer``),
    ``crds`` (CRD files, names in ``../shared/k8s-crds`` or paths),
    ``root`` (where pod directories and claims live; a temporary directory by
    default), kubelet timing (``restart_backoff``, ``max_restarts``,
    ``grace_cap`` on termination grace periods, ``image_backoff``), ``env``
    (extra variables for every container process), ``auto_namespaces``
    (create a namespace on first use; False: 404 as a real cluster), ``network``
    (``"auto"``: each pod in its own network namespace on a pod network where this
    machine allows it, else on this host's loopback, see :mod:`podnet`; ``"pods"``
    requires namespaces; ``"loopback"``), ``http_stop_wait`` (seconds leaving the block
    waits for the HTTP server to close its streams; past it the rest stops all the same,
    and :attr:`http_stop_late` says so), ``warm_image`` (False: every pod on the pod
    network imports for itself, see :mod:`warmimage`).

    ``apis`` says which Kubeflow APIs the cluster has: ``"kubeflow-v1"`` (the
    Training Operator's PyTorchJob and TFJob; the default) and/or ``"trainer"``
    (Kubeflow Trainer v2: TrainJob, TrainingRuntime, ClusterTrainingRuntime with
    ``torch-distributed`` and ``jax-distributed`` installed, JobSet, batch Jobs, their
    controllers, and Kueue: :attr:`kueue`). An API left out is absent as on a real cluster: not
    in discovery, 404 on its paths. ``webhooks=False`` runs Trainer v2 without
    its admission webhooks (a TrainJob naming a missing runtime is then
    accepted, and the controller reports it); ``kueue=False`` without Kueue (the
    queue-name label is ignored).
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        crds: Iterable[str | Path] = DEFAULT_CRDS,
        root: str | Path | None = None,
        node_name: str = "emulator-node",
        restart_backoff: float = 0.2,
        max_restarts: int = 5,
        grace_cap: float = 2.0,
        image_backoff: float = 0.3,
        bookmark_interval: float = 5.0,
        history: int = 10_000,
        env: dict[str, str] | None = None,
        auto_namespaces: bool = True,
        apis: Iterable[str] = ("kubeflow-v1",),
        webhooks: bool = True,
        kueue: bool = True,
        trainer_status: bool = False,
        network: str = "auto",
        http_stop_wait: float = 10.0,
        warm_image: bool | None = None,
    ) -> None:
        self.apis = frozenset(apis)
        self.http_stop_wait = http_stop_wait
        unknown = self.apis - set(APIS)
        if unknown:
            raise ValueError(f"unknown APIs {sorted(unknown)}: choose from {', '.join(APIS)}")
        if "kubeflow-v1" not in self.apis:
            crds = [c for c in crds if Path(str(c)).name not in DEFAULT_CRDS]
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.id = uuid.uuid4().hex[:12]
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="k8s-emulator-") if root is None else root)
        self.registry = Registry(CORE)
        self.store = Store(history)
        self.api = ApiServer(self.store, self.registry, auto_namespaces=auto_namespaces)
        self._crds: dict[str, list[Obj]] = {}  # CRD objects by group
        for crd in crds:
            self.install_crd(crd)
        #: Kueue's control API (see :class:`Kueue`); it runs with Trainer v2 unless ``kueue=False``.
        self.kueue = Kueue()
        self._with_kueue = kueue
        self.trainer_kinds: TrainerKinds | None = None
        #: Trainer's status server (``trainer_status``: its ``TrainJobStatus`` gate on).
        self.trainer_status: StatusServer | None = None
        self._status_gate = trainer_status
        if "trainer" in self.apis:
            self._install_trainer(webhooks)
        self.faults = Faults()
        #: ``"pods"`` (a network namespace per pod) or ``"loopback"`` (see :mod:`rewrite`).
        self.network_mode = choose_network(network)
        self.podnet: PodNetwork | None = None
        self._relays: list[Relay] = []
        self.accounting = Accounting()
        self.network = Network(
            lambda ns: {s["metadata"]["name"] for s in self.store.objects(SERVICES.key, ns)[0]},
            lambda ns: {
                s["metadata"]["name"]
                for s in self.store.objects(SERVICES.key, ns)[0]
                if s.get("spec", {}).get("clusterIP") == "None"
            },
        )
        timing = (restart_backoff, max_restarts, grace_cap, image_backoff)
        self.kubelet_settings = KubeletSettings(node_name, *timing, dict(env or {}), warm_image)
        self.kubelet: Kubelet | None = None
        self.operator: Operator | None = None
        #: Trainer v2's controllers (TrainJob, JobSet, Job), while running.
        self.controllers: list[ControlLoop] = []
        #: Queues of the open streams (watches, log follows); woken on shutdown.
        self.streams: set[asyncio.Queue[Any]] = set()
        self.closing = False
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: CountingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._reaper: procs.Reaper | None = None
        #: :meth:`describe` at the moment :meth:`stop` ran with an exception in flight.
        self.final_state: str | None = None
        #: Whether :meth:`stop` gave up waiting for the HTTP server's shutdown and
        #: stopped its loop all the same (its pods and controllers are stopped either way).
        self.http_stop_late = False

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> Emulator:
        track(self)
        if self.network_mode == "pods":
            self.podnet = PodNetwork(self.id)
        netns = self.podnet.prefix if self.podnet else ""
        self._reaper = procs.Reaper(f"{self.id}/", self.root if self._own_root else None, netns)
        if self.podnet is not None:
            self.podnet.start()
        self.kubelet = Kubelet(
            self.api,
            self.network,
            self.faults,
            self.root,
            self.id,
            self.kubelet_settings,
            self.podnet,
        )
        kinds = {
            fw.kind: r
            for fw in FRAMEWORKS
            if (r := self.registry.of_kind("kubeflow.org/v1", fw.kind)) is not None
        }
        self.operator = Operator(self.api, kinds)
        if self.trainer_kinds is not None:
            self.controllers = [
                JobController(self.api, backoff=self.kubelet_settings.restart_backoff),
                JobSetController(self.api),
                TrainJobController(self.api, self.trainer_kinds, self._status_plugins()),
            ]
            if self._with_kueue:
                self.kueue.start(self.api, self.trainer_kinds.trainjobs)
        ready = threading.Event()
        errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, errors), name="k8s-emulator-http", daemon=True
        )
        self._thread.start()
        while not ready.wait(0.5):  # however slow a cold start is, but not a dead thread
            if not self._thread.is_alive():
                raise RuntimeError("the emulator's HTTP server thread ended before serving")
        if errors:
            raise RuntimeError("the emulator's HTTP server did not start") from errors[0]
        return self

    def _serve(self, ready: threading.Event, errors: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            server = CountingHTTPServer(make_app(self))
            server.on_connection = self._on_connection
            sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
            server.add_sockets(sockets)
            self.port = int(sockets[0].getsockname()[1])
            self._loop, self._server = loop, server
        except BaseException as exc:  # reported to start()
            errors.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            loop.close()

    def _on_connection(self, change: int) -> None:
        if change > 0:
            self.accounting.open("conn")
        else:
            self.accounting.close("conn")

    async def _shutdown_http(self) -> None:
        assert self._server is not None
        self._server.stop()
        for wake in list(self.streams):
            wake.put_nowait(None)
        await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(self._server.close_all_connections(), 5)
        except asyncio.TimeoutError:
            pass

    def stop(self) -> None:
        """Stop serving, stop the operator, kill every pod process, remove the root directory."""
        if self.closing:
            return
        if sys.exc_info()[0] is not None:  # stopped by a failure: keep what it saw
            self.final_state = self.describe()
        self.closing = True
        if self._loop is not None and self._thread is not None:
            future = asyncio.run_coroutine_threadsafe(self._shutdown_http(), self._loop)
            try:
                future.result(timeout=self.http_stop_wait)
            except TimeoutError:  # a loop busy with many pods' streams: stop it all the same
                future.cancel()
                self.http_stop_late = True
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=10)
        if self.trainer_status is not None:
            self.trainer_status.close()
        if self.operator is not None:
            self.operator.close()
        self.kueue.close()
        for controller in self.controllers:
            controller.close()
        if self.kubelet is not None:
            self.kubelet.close()
        procs.kill_all(f"{self.id}/")
        for relay in self._relays:
            relay.close()
        if self.podnet is not None:
            self.podnet.close()
        if self._reaper is not None:
            self._reaper.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- clients -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_configuration(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.Configuration`` for this emulator (``token``: the emulator's)."""
        from kubernetes import client

        config = client.Configuration(host=self.url)
        token = token if token is not None else self.token
        if token:
            config.api_key = {"authorization": token}
            config.api_key_prefix = {"authorization": "Bearer"}
        return config

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` talking to this emulator."""
        from kubernetes import client

        return client.ApiClient(self.client_configuration(token))

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """A kubeconfig for ``kubectl`` or ``kubernetes.config.load_kube_config``."""
        user: dict[str, str] = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": user}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    # --- discovery -----------------------------------------------------------------------

    def _install_trainer(self, webhooks: bool) -> None:
        """Kubeflow Trainer v2's CRDs, JobSet and batch Jobs, webhooks and default runtime."""
        for crd in TRAINER_CRDS:
            gated = self._status_gate and "trainjobs" in str(crd)
            self.install_crd(crd, defaulted=True, change=with_trainer_status if gated else None)
        self.registry.add(JOBSETS)
        self.registry.add(JOBS)
        found = {
            kind: self.registry.of_kind(TRAINER_API_VERSION, kind)
            for kind in ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")
        }
        trainjobs, runtimes, cluster_runtimes = found.values()
        assert trainjobs is not None and runtimes is not None and cluster_runtimes is not None
        self.trainer_kinds = TrainerKinds(trainjobs, runtimes, cluster_runtimes)
        self.api.defaulters[JOBS.key] = default_job
        self.api.rules[JOBS.key] = [job_rules]
        self.api.mutating[JOBSETS.key] = [default_jobset]
        self.api.rules[trainjobs.key] = [trainjob_rules]
        if webhooks:
            TrainerWebhooks(self.api, self.trainer_kinds).install()
        self.api.create(cluster_runtimes, "", default_runtime())
        self.api.create(cluster_runtimes, "", jax_runtime())

    def _status_plugins(self) -> list[Callable[[Obj, Obj], None]]:
        if not self._status_gate or self.trainer_kinds is None:
            return []
        self.trainer_status = StatusServer(
            self.api, self.trainer_kinds.trainjobs, self.network, self.root
        )
        self.trainer_status.start()
        if self.podnet is not None and self.kubelet is not None and self.kubelet.hosts:
            address = self.trainer_status.serve_on(self.podnet.listen)
            self.kubelet.hosts.served[(STATUS_NAMESPACE, STATUS_SERVICE)] = address
        return [self.trainer_status.enforce]

    def serve_service_monitors(self) -> list[Resource]:
        """Serve the Prometheus Operator's ServiceMonitor (a cluster with that operator)."""
        return self.install_crd(
            Path(__file__).parent / "crds" / "monitoring.coreos.com_servicemonitors.yaml"
        )

    def install_crd(
        self,
        path: str | Path,
        *,
        defaulted: bool = False,
        change: Callable[[Obj], Obj] | None = None,
    ) -> list[Resource]:
        """Serve the custom resources of a CRD file (``defaulted``: apply its schema defaults;
        ``change``: the CRD served instead of the file's)."""
        crd = load_crd(path) if change is None else change(load_crd(path))
        resources = crd_resources(crd, defaulted=defaulted)
        for resource in resources:
            self.registry.add(resource)
        self._crds.setdefault(crd["spec"]["group"], []).append(crd)
        self._store_crd(crd)
        return resources

    def _store_crd(self, crd: Obj) -> None:
        """The CRD object itself, as ``kubectl get crd`` shows it (Established)."""
        obj = deep(crd)
        obj["metadata"] = {
            "name": crd["metadata"]["name"],
            "annotations": crd["metadata"].get("annotations", {}),
        }
        conditions = [
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": now(),
            }
            for kind, reason, message in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ]
        obj["status"] = {
            "conditions": conditions,
            "acceptedNames": crd["spec"]["names"],
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
        }
        with self.store.lock:
            if self.store.get(CRDS.key, "", obj["metadata"]["name"]) is None:
                obj["metadata"].update(uid=new_uid(), creationTimestamp=now(), generation=1)
                self.store.add(CRDS.key, obj)

    def discovery(self, root: str, group: str, version: str, host: str) -> Obj:
        """The discovery document at ``/api[/v1]`` or ``/apis[/group[/version]]``."""
        return discovery_document(self.registry, root, group, version, host)

    # --- accounting ----------------------------------------------------------------------

    def stats(self) -> Stats:
        """Requests by (verb, resource), and open/peak watches, log follows and connections."""
        return self.accounting.snapshot()

    def reset_stats(self) -> None:
        self.accounting.reset()

    # --- faults --------------------------------------------------------------------------

    def deny(
        self,
        count: int | None = None,
        *,
        verbs: Iterable[str] | None = None,
        resources: Iterable[str] | None = None,
        user: str = DEFAULT_USER,
    ) -> None:
        """Answer 403 (an RBAC denial for ``user``) to the next ``count`` resource requests.

        ``count=None``: until :meth:`clear_faults`. ``verbs``/``resources``
        (``"create"``, ``"pytorchjobs"``, ``"pods/log"``...) narrow which
        requests are refused. Discovery stays allowed, as RBAC allows it to
        every authenticated user.
        """
        self.faults.refuse(403, count, verbs, resources, user)

    def slow_down(
        self,
        seconds: float,
        *,
        verbs: Iterable[str] | None = None,
        resources: Iterable[str] | None = None,
        names: str = "*",
    ) -> None:
        """Answer matching requests ``seconds`` late (a loaded API server), until
        :meth:`clear_faults`. ``verbs``/``resources`` narrow them as for :meth:`deny`;
        ``names`` is a glob of the object a request names (``"*-master-0"``)."""
        self.faults.slow(seconds, verbs, resources, names)

    def unauthorized(self, count: int | None = None) -> None:
        """Answer 401 Unauthorized to the next ``count`` requests (None: until cleared)."""
        self.faults.refuse(401, count, None, None, DEFAULT_USER)

    def remove_crds(self, group: str = "kubeflow.org") -> None:
        """Behave as if ``group``'s CRDs were not installed: 404 on its paths and discovery,
        and no CustomResourceDefinition objects for it."""
        self.registry.hidden_groups.add(group)
        for crd in self._crds.get(group, []):
            self.store.remove(CRDS.key, "", crd["metadata"]["name"])

    def restore_crds(self, group: str = "kubeflow.org") -> None:
        """Undo :meth:`remove_crds`."""
        self.registry.hidden_groups.discard(group)
        for crd in self._crds.get(group, []):
            self._store_crd(crd)

    def make_unschedulable(
        self, pods: str = "*", *, namespace: str | None = None, message: str = INSUFFICIENT_GPU
    ) -> None:
        """Keep pods whose name matches the glob ``pods`` Pending with a FailedScheduling Event."""
        self.faults.make_unschedulable(pods, namespace, message)

    def set_pullable_images(self, images: Iterable[str] | Callable[[str], bool] | None) -> None:
        """Which images pull: glob patterns, a predicate, or None for any (the default)."""
        self.faults.set_pullable(images)

    def set_pull_delay(self, delays: Mapping[str, float] | None) -> None:
        """Seconds a pull of an image matching each glob takes (None: none, the default).

        A pod whose image has a delay is pulled by every pod that uses it (as
        if each were on a node without it): ``Pulling`` Event, ``ContainerCreating``
        for that long, then ``Pulled`` ("Successfully pulled image ... in 2.5s").
        """
        self.faults.set_pull_delay(delays)

    def kill_pod(
        self,
        name: str,
        namespace: str = "default",
        container: str | None = None,
        sig: int = signal.SIGKILL,
    ) -> None:
        """Kill a pod's running container process with ``sig`` (it restarts per restartPolicy)."""
        assert self.kubelet is not None
        self.kubelet.signal_container(self.api.get(PODS, namespace, name), container, sig)

    def oom_kill(self, name: str, namespace: str = "default", container: str | None = None) -> None:
        """Kill a pod's container as the OOM killer would (exit code 137, reason OOMKilled)."""
        assert self.kubelet is not None
        pod = self.api.get(PODS, namespace, name)
        self.kubelet.signal_container(pod, container, signal.SIGKILL, oom=True)

    def expire_watch_history(self) -> None:
        """Forget past events: a watch resuming from an older resourceVersion gets 410 Gone."""
        self.store.compact()

    def clear_faults(self) -> None:
        """Disarm every fault (refusals, slowness, scheduling, pulls); restore removed CRDs."""
        self.faults.clear()
        for group in list(self.registry.hidden_groups):
            self.restore_crds(group)

    # --- inspection ----------------------------------------------------------------------

    def describe(self) -> str:
        """Jobs, pods, kubelet workers, last Events, controller queues and threads, as text."""
        return describe_state(self)

    def pod_log(
        self,
        name: str,
        namespace: str = "default",
        container: str | None = None,
        previous: bool = False,
    ) -> str:
        """The text of a pod's container log, as ``kubectl logs`` would print it."""
        assert self.kubelet is not None
        return self.kubelet.log(self.api.get(PODS, namespace, name), container, previous).text()

    @property
    def net_faults(self) -> NetFaults:
        """Faults of the pod network (:mod:`netfaults`): link down, drops, names, nodes."""
        if self.kubelet is None or self.kubelet.net_faults is None:
            raise ValueError("network faults need the pod network (network='pods')")
        return self.kubelet.net_faults

    def expose(self, port: int) -> str:
        """``host:port`` at which pods reach ``port`` of this host's loopback (a service the
        tests run, standing for one outside the cluster): a relay on the pod network, or
        ``127.0.0.1:port`` where pods share this host's loopback."""
        if self.podnet is None:
            return f"127.0.0.1:{port}"
        relay = Relay(self.podnet, port)
        self._relays.append(relay)
        return relay.address

    def processes(self) -> list[psutil.Process]:
        """Every live process started for a pod of this emulator."""
        return procs.members(f"{self.id}/")
