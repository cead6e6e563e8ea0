"""What every Kubeflow kind is: where it is served, what it runs, and what it knows of itself.

A kind is one instance of a :class:`KubeflowKind` subclass, in its own module
under ``kinds/``. The declared fields are data the kind-neutral code reads
(API coordinates, container, port, pod label, the frameworks it runs and their
limits); the methods are what differs between kinds: building the job object,
reading its state and shape back, and finding its pods and the pod of node 0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .... import events as ev
from ...base import RuntimeRecord
from ..images import STOCK_IMAGES, ImagePolicy
from ..reported import Reported

if TYPE_CHECKING:
    from ....spec import JobSpec
    from ..client import Connection
    from ..options import K8sOptions

Manifest = dict[str, Any]
#: A job's state as its status says: (state, reason, message).
Condition = tuple[ev.JobState, str, str]
Pod = TypeVar("Pod", bound=Mapping[str, Any])


@dataclass(frozen=True)
class Limits:
    """What a kind's pods cannot run: each non-empty text is the error naming the fix.

    ``elastic`` refuses ``--elastic``; ``nproc`` refuses ``--nproc`` above 1
    (``{nproc}`` is the value given); ``prometheus`` refuses ``--prometheus``;
    ``gpu_per_process`` says each process needs its own GPU (NCCL), unless
    ``--dist-backend gloo``.
    """

    elastic: str = ""
    nproc: str = ""
    prometheus: str = ""
    gpu_per_process: bool = False


@dataclass(frozen=True)
class JobInputs:
    """What a kind builds a job object from.

    ``files`` are the payload's relative paths (they appear under
    ``/opt/disttrain/payload`` in each pod); ``versions`` (``python``,
    ``torch``, ...) pick the default image and are recorded as annotations, as
    is ``notebook`` (a path); ``script`` says the payload is a script with its
    folder (:mod:`..script`); ``runtime_kind`` is what the kind's
    :meth:`KubeflowKind.runtime_kind` said ("" for its default); ``warm`` the
    library modules each pod's launcher imports ahead (:mod:`...runtime.warm`).
    """

    spec: JobSpec
    opts: K8sOptions
    files: tuple[str, ...]
    versions: Mapping[str, str]
    notebook: str | None = None
    images: ImagePolicy = STOCK_IMAGES
    script: bool = False
    runtime_kind: str = ""
    warm: tuple[str, ...] = ()


def build(
    kind: KubeflowKind,
    spec: JobSpec,
    opts: K8sOptions,
    files: Iterable[str],
    versions: Mapping[str, str],
    **extra: Any,
) -> Manifest:
    """``kind``'s job object of ``spec``: :meth:`KubeflowKind.manifest` of the
    :class:`JobInputs` these make (``extra``: its optional fields). Raises
    :class:`~..syntax.OptionError`."""
    return kind.manifest(JobInputs(spec, opts, tuple(files), versions, **extra))


@dataclass(frozen=True)
class KubeflowKind(ABC):
    """One Kubeflow custom resource: where it is served and how its pods are laid out.

    ``replicas`` are the replica types in node order (the first holds node 0);
    ``replicas_field`` the spec field holding them ("" when the kind has none);
    ``container`` is the container the operator configures (env, ports);
    ``port_name``/``port`` the port it reads the rendezvous/cluster port from;
    ``pod_label`` the label whose value is the job's name on each of its pods;
    ``api`` the ``--kubeflow-api`` value that selects it ("" for none);
    ``frameworks`` the ``--framework`` values it runs; ``default`` whether it is
    what they run as when ``--kubeflow-api`` names no other kind (the first
    default kind of the table wins); ``launcher`` the command that runs the
    payload file in its training container; ``limits`` what it refuses;
    ``install`` how an admin installs the controller that serves it ("" if not told).
    ``launchers`` are ``(framework, launcher)`` pairs replacing ``launcher`` for those
    frameworks; ``framework_runtimes`` ``(framework, name)`` pairs, the training runtime a job of
    that framework names without ``--runtime``; ``refuses`` ``(framework, error)`` pairs:
    ``--kubeflow-api`` naming this kind for that framework is that error, naming the fix.
    """

    group: str
    version: str
    plural: str
    kind: str
    replicas_field: str
    replicas: tuple[str, ...]
    container: str
    port_name: str
    port: int
    frameworks: tuple[str, ...]
    launcher: tuple[str, ...]
    pod_label: str = "training.kubeflow.org/job-name"
    api: str = ""
    default: bool = True
    limits: Limits = Limits()
    install: str = ""
    launchers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    framework_runtimes: tuple[tuple[str, str], ...] = ()
    refuses: tuple[tuple[str, str], ...] = ()

    @property
    def api_version(self) -> str:
        """``group/version`` as written in a manifest."""
        return f"{self.group}/{self.version}"

    def unserved(self) -> str:
        """The error for a 404 that says the cluster does not serve this kind ("" when the
        kind says no more than "not found")."""
        if not self.install:
            return ""
        return f"the cluster has no {self.api_version} {self.kind} resource (404): {self.install}"

    def launcher_of(self, framework: str) -> tuple[str, ...]:
        """The command that runs the payload file for ``framework`` (see ``launchers``)."""
        return dict(self.launchers).get(framework, self.launcher)

    def default_runtime(self, framework: str) -> str | None:
        """The training runtime ``framework``'s jobs name without ``--runtime`` (None: the
        option's own default)."""
        return dict(self.framework_runtimes).get(framework)

    def refuse_framework(self, spec: JobSpec) -> None:
        """Raise :class:`~..syntax.ConflictingOptionsError` when this kind refuses ``spec``'s
        framework (``refuses``)."""
        error = dict(self.refuses).get(spec.framework)
        if error:
            from ..syntax import ConflictingOptionsError

            raise ConflictingOptionsError(error)

    def pod_selector(self, job: str) -> str:
        """The label selector of every pod of job ``job``."""
        return f"{self.pod_label}={job}"

    # -- manifest ------------------------------------------------------------------
    @abstractmethod
    def manifest(self, job: JobInputs) -> Manifest:
        """The job object of ``job.spec`` (pure).

        Checks ``job.opts`` against the spec first (:func:`..template.check_job`
        and :meth:`refuse`).
        """

    def refuse(self, spec: JobSpec, opts: K8sOptions) -> None:
        """Raise :class:`~..syntax.ConflictingOptionsError` for what this kind cannot carry
        beyond its :attr:`limits` (also when ``--kubeflow-api`` names it for a framework
        another kind runs); by default what ``refuses`` says."""
        self.refuse_framework(spec)

    def runtime_kind(self, conn: Connection | None, opts: K8sOptions) -> str:
        """The kind of the training runtime the job names ("" when the kind names none).

        ``conn`` None: no cluster to ask (render, export). May raise
        :class:`~jupyter_disttrain.spec.SpecError` naming what the cluster offers.
        """
        return ""

    def runtimes(self, conn: Connection, *, missing_ok: bool) -> list[RuntimeRecord]:
        """The training runtimes of this kind the cluster offers (none by default)."""
        return []

    # -- reading a job back -----------------------------------------------------------
    @abstractmethod
    def condition(self, obj: Mapping[str, Any], ran: bool = False) -> Condition | None:
        """The job's state from its status, or None while it says nothing yet; ``ran``: the
        job read ``Running`` before (pods starting then are a restart's)."""

    def reported(self, obj: Mapping[str, Any]) -> Reported | None:
        """The progress the job reports in its own object (:mod:`..reported`); None by
        default (the kind has no such field)."""
        return None

    @abstractmethod
    def shape(self, obj: Mapping[str, Any]) -> tuple[int, int]:
        """(nodes, processes per node) of a job object of this kind."""

    @abstractmethod
    def has_leader(self, obj: Mapping[str, Any]) -> bool:
        """True when the job object has a leader replica (node 0 apart from the workers)."""

    # -- pods ---------------------------------------------------------------------------
    @abstractmethod
    def owns(self, pod: Mapping[str, Any]) -> bool:
        """True when ``pod`` (a JSON dict) is laid out as this kind's pods are (by labels)."""

    @abstractmethod
    def node_index(self, pod: Mapping[str, Any], has_leader: bool) -> int:
        """The node number of one of this kind's pods; ``has_leader`` as :meth:`has_leader`."""

    @abstractmethod
    def pods_have_leader(self, pods: Sequence[Mapping[str, Any]]) -> bool:
        """:meth:`has_leader` told from the job's pods alone."""

    def runs_nodes(self, pod: Mapping[str, Any]) -> bool:
        """True when ``pod`` runs training nodes (not, say, an initializer); all by default."""
        return True

    def name_wait(self, pod: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(init container, name)`` while ``pod`` waits in an init container of the
        controller's for ``name`` to resolve; None (the default: no kind's pods wait so)."""
        return None

    def leader_pods(self, pods: Sequence[Pod]) -> list[Pod]:
        """The pods among a job's ``pods`` that run node 0 (more than one after a restart)."""
        leader = self.pods_have_leader(pods)
        return [p for p in pods if self.runs_nodes(p) and self.node_index(p, leader) == 0]

    @abstractmethod
    def leader_selector(self, job: str) -> dict[str, str]:
        """Labels that select the pod of rank 0 of ``job`` (its metrics source)."""
