"""The resources the emulator serves: built-in core/v1 kinds and custom resources from CRDs."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, eq=False)
class Resource:
    """One REST resource (``pods``, ``pytorchjobs``...) of one group/version.

    Resources compare by identity: each is defined once.
    """

    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = _ALL_VERBS
    subresources: tuple[str, ...] = ()
    field_selectors: frozenset[str] = _META_FIELDS
    printer_columns: tuple[dict[str, Any], ...] = ()
    #: The CRD's OpenAPI v3 schema (custom resources only).
    schema: dict[str, Any] | None = field(default=None, repr=False)
    categories: tuple[str, ...] = ()
    #: Apply the schema's ``default`` values on create and update (custom resources only).
    defaulted: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Identifies the resource in the store: ``group/version/plural``."""
        return f"{self.group}/{self.version}/{self.plural}"

    @property
    def qualified(self) -> str:
        """``plural.group`` as error messages name it (``pods`` for core)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def custom(self) -> bool:
        return self.schema is not None


def _core(plural: str, kind: str, **extra: Any) -> Resource:
    return Resource("", "v1", plural, kind.lower(), kind, **extra)


POD_FIELDS = _META_FIELDS | {
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
}
EVENT_FIELDS = _META_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}

PODS = _core(
    "pods",
    "Pod",
    short_names=("po",),
    subresources=("log", "status"),
    field_selectors=frozenset(POD_FIELDS),
    categories=("all",),
)
CONFIGMAPS = _core("configmaps", "ConfigMap", short_names=("cm",))
SECRETS = _core("secrets", "Secret", field_selectors=_META_FIELDS | {"type"})
EVENTS = _core("events", "Event", short_names=("ev",), field_selectors=frozenset(EVENT_FIELDS))
SERVICES = _core(
    "services", "Service", short_names=("svc",), subresources=("status",), categories=("all",)
)
NAMESPACES = _core(
    "namespaces",
    "Namespace",
    namespaced=False,
    short_names=("ns",),
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    field_selectors=frozenset({"metadata.name", "status.phase"}),
)

#: CustomResourceDefinitions, read-only: the emulator installs them (``Emulator.install_crd``).
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "customresourcedefinition",
    "CustomResourceDefinition",
    namespaced=False,
    short_names=("crd", "crds"),
    verbs=("get", "list", "watch"),
    field_selectors=frozenset({"metadata.name"}),
)

CORE: tuple[Resource, ...] = (PODS, CONFIGMAPS, SECRETS, EVENTS, SERVICES, NAMESPACES, CRDS)

#: ``batch/v1`` Jobs (served with Kubeflow Trainer v2, whose JobSets make them).
JOBS = Resource(
    "batch",
    "v1",
    "jobs",
    "job",
    "Job",
    subresources=("status",),
    field_selectors=_META_FIELDS | {"status.successful"},
    categories=("all",),
)
#: JobSet's CRD is not among the shared CRD files: its objects are kept as they come.
_PRESERVE: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
JOBSETS = Resource(
    "jobset.x-k8s.io",
    "v1alpha2",
    "jobsets",
    "jobset",
    "JobSet",
    subresources=("status",),
    printer_columns=(
        {"name": "TerminalState", "type": "string", "jsonPath": ".status.terminalState"},
        {"name": "Restarts", "type": "string", "jsonPath": ".status.restarts"},
        {"name": "Suspended", "type": "string", "jsonPath": ".spec.suspend"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ),
    schema=_PRESERVE,
)

#: The CRDs installed by default: the Training Operator's v1 jobs.
DEFAULT_CRDS = ("kubeflow.org_pytorchjobs.yaml", "kubeflow.org_tfjobs.yaml")
#: Kubeflow Trainer v2's CRDs (``trainer.kubeflow.org/v1alpha1``).
TRAINER_CRDS = (
    "trainer.kubeflow.org_trainjobs.yaml",
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
)


@functools.cache
def _load_crd(path: Path) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as fh:
        for doc in yaml.load_all(fh, Loader=loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                return doc
    raise ValueError(f"{path} holds no CustomResourceDefinition")


def load_crd(path: str | Path) -> dict[str, Any]:
    """The CustomResourceDefinition in ``path`` (a file name in ``k8s-crds/`` or a path)."""
    from ..crd_schema import CRD_DIR  # (jsonschema takes seconds to import: only when used)

    crd_path = Path(path)
    if not crd_path.is_absolute() and not crd_path.exists():
        crd_path = CRD_DIR / crd_path
    return _load_crd(crd_path.resolve())


def crd_resources(crd: dict[str, Any], *, defaulted: bool = False) -> list[Resource]:
    """A resource per served version of a CustomResourceDefinition."""
    spec, names = crd["spec"], crd["spec"]["names"]
    out = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        subresources = tuple(sorted(version.get("subresources") or {}))
        out.append(
            Resource(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                singular=names.get("singular", names["kind"].lower()),
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames", ())),
                subresources=subresources,
                printer_columns=tuple(version.get("additionalPrinterColumns", ())),
                schema=version["schema"]["openAPIV3Schema"],
                categories=tuple(names.get("categories", ())),
                defaulted=defaulted,
            )
        )
    return out


class Registry:
    """The resources currently served, by group/version and plural."""

    def __init__(self, resources: Iterable[Resource] = CORE) -> None:
        self._by_key: dict[str, Resource] = {}
        self.hidden_groups: set[str] = set()
        for resource in resources:
            self.add(resource)

    def add(self, resource: Resource) -> None:
        self._by_key[resource.key] = resource

    def all(self) -> list[Resource]:
        """Every known resource, served or hidden."""
        return list(self._by_key.values())

    def find(self, group: str, version: str, plural: str) -> Resource | None:
        resource = self._by_key.get(f"{group}/{version}/{plural}")
        if resource is None or resource.group in self.hidden_groups:
            return None
        return resource

    def served(self) -> list[Resource]:
        return [r for r in self._by_key.values() if r.group not in self.hidden_groups]

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per API group (not the core group)."""
        out: dict[str, list[str]] = {}
        for resource in self.served():
            if resource.group and resource.version not in out.setdefault(resource.group, []):
                out[resource.group].append(resource.version)
        return out

    def of_kind(self, api_version: str, kind: str) -> Resource | None:
        for resource in self._by_key.values():
            if resource.api_version == api_version and resource.kind == kind:
                return resource
        return None
