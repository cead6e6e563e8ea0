"""The API server's object semantics, shared by the HTTP handlers and the controllers.

Create (names, generateName, validation, server-set metadata), get, list
(selectors, pagination), replace and patch (optimistic concurrency, status
subresource, immutable ConfigMaps/Secrets), delete (graceful pod deletion,
finalizers, Foreground/Background/Orphan propagation through
ownerReferences, as the garbage collector does: ``apiserver_delete.py``) and Events
(``apiserver_events.py``).
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import string
from collections.abc import Callable
from typing import Any

from . import schema
from .apiserver_delete import Deletion
from .apiserver_events import EventRecorder
from .meta import (
    ApiError,
    Obj,
    bad_request,
    deep,
    field_selector,
    invalid,
    label_selector,
    name_error,
    new_uid,
    not_found,
    now,
)
from .patch import json_patch, merge_patch
from .resources import CONFIGMAPS, NAMESPACES, PODS, SECRETS, SERVICES, Registry, Resource
from .store import Store
from .tokens import TokenIssuer

MAX_DATA_BYTES = 1024 * 1024
_SERVER_META = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
)
_KEY_CHARS = set(string.ascii_letters + string.digits + "-._")


def _suffix() -> str:
    return "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))


#: A mutating admission webhook: ``(operation, object, old object)``; changes the object in
#: place, or raises an :class:`ApiError` to deny the request.
Mutator = Callable[[str, Obj, Obj | None], None]
#: A validating admission webhook: returns warnings, or raises an :class:`ApiError` to deny.
Validator = Callable[[str, Obj, Obj | None], list[str]]
#: Validation inside the API server (a CRD's CEL rules): 422 causes for ``(object, old)``.
Rules = Callable[[Obj, Obj | None], list[Obj]]


class ApiServer(Deletion, EventRecorder):
    """Object semantics over a :class:`Store`; every method is thread-safe."""

    def __init__(self, store: Store, registry: Registry, *, auto_namespaces: bool = True) -> None:
        self.store = store
        self.registry = registry
        #: Create a missing namespace on first use (else: 404, as a real API server).
        self.auto_namespaces = auto_namespaces
        #: Admission, by resource key: mutating webhooks, then the API server's own
        #: validation (schema, :attr:`rules`), then validating webhooks.
        self.mutating: dict[str, list[Mutator]] = {}
        self.validating: dict[str, list[Validator]] = {}
        self.rules: dict[str, list[Rules]] = {}
        #: Built-in defaulting (what the API server's strategies fill in), by resource key.
        self.defaulters: dict[str, Callable[[Obj], None]] = {}
        #: TokenRequest/TokenReview for projected service account tokens.
        self.tokens = TokenIssuer()
        super().__init__()
        for name in ("default", "kube-system", "kube-public"):
            self.ensure_namespace(name)

    # --- namespaces ----------------------------------------------------------------------

    def ensure_namespace(self, name: str) -> None:
        """Create namespace ``name`` unless it exists (namespaces are made on demand)."""
        with self.store.lock:
            if self.store.get(NAMESPACES.key, "", name) is None:
                labels = {"kubernetes.io/metadata.name": name}
                obj: Obj = {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                }
                self._stamp(NAMESPACES, obj)
                self.store.add(NAMESPACES.key, obj)

    def _namespace_exists(self, namespace: str) -> None:
        if self.store.get(NAMESPACES.key, "", namespace) is not None:
            return
        if not self.auto_namespaces:
            raise not_found("namespaces", namespace, "", "namespaces")
        self.ensure_namespace(namespace)

    # --- create --------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        strict: bool = False,
    ) -> tuple[Obj, list[str]]:
        """Create ``body``; return the stored object and warnings (pruned unknown fields)."""
        obj = self._check_body(resource, namespace, body)
        meta = obj["metadata"]
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(
                    resource.kind,
                    resource.group,
                    "",
                    [
                        {
                            "reason": "FieldValueRequired",
                            "field": "metadata.name",
                            "message": "Required value: name or generateName is required",
                        }
                    ],
                )
            meta["name"] = meta["generateName"] + _suffix()
        for key in _SERVER_META:
            meta.pop(key, None)
        for mutate in self.mutating.get(resource.key, ()):
            mutate("CREATE", obj, None)
        warnings = self._admit(resource, obj, strict=strict)
        if resource.custom and "status" in resource.subresources:
            obj.pop("status", None)
        self._defaults(resource, obj)
        for validate in self.validating.get(resource.key, ()):
            warnings += validate("CREATE", obj, None)
        with self.store.lock:
            if self.store.get(resource.key, namespace, meta["name"]) is not None:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{resource.qualified} "{meta["name"]}" already exists',
                    self._details(resource, meta["name"]),
                )
            self._stamp(resource, obj)
            if dry_run:
                return obj, warnings
            if resource.namespaced:
                self._namespace_exists(namespace)
            return self.store.add(resource.key, obj), warnings

    def _check_body(self, resource: Resource, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = deep(body)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version is not None and api_version != resource.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({resource.api_version})"
            )
        if kind is not None and kind != resource.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
            )
        obj = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if resource.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        return obj

    def _stamp(self, resource: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        meta["uid"] = meta.get("uid") or new_uid()  # (a defaulter may have needed it already)
        meta["creationTimestamp"] = now()
        if resource.custom:
            meta["generation"] = 1

    def _admit(
        self, resource: Resource, obj: Obj, *, strict: bool, old: Obj | None = None
    ) -> list[str]:
        """Validate ``obj`` (422), prune unknown custom-resource fields, apply schema defaults."""
        name = obj["metadata"]["name"]
        causes: list[Obj] = []
        error = name_error(name)
        if error:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": "metadata.name",
                    "message": f'Invalid value: "{name}": {error}',
                }
            )
        warnings: list[str] = []
        if resource.custom:
            causes += schema.validate(resource, obj)
            if not causes:
                unknown = schema.prune(resource, obj)
                if unknown and strict:
                    listing = ", ".join(f'unknown field "{path}"' for path in unknown)
                    raise bad_request(f"strict decoding error: {listing}")
                warnings = [f'unknown field "{path}"' for path in unknown]
                if resource.defaulted:
                    schema.apply_defaults(resource, obj)
        elif resource in (CONFIGMAPS, SECRETS):
            causes += self._data_causes(resource, obj)
        for rules in self.rules.get(resource.key, ()):
            causes += rules(obj, old)
        if causes:
            raise invalid(resource.kind, resource.group, name, causes)
        return warnings

    def _data_causes(self, resource: Resource, obj: Obj) -> list[Obj]:
        if resource is SECRETS and isinstance(obj.get("stringData"), dict):
            data = obj.setdefault("data", {})
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(str(value).encode()).decode()
        size, causes, seen = 0, [], set()
        for field in ("data", "binaryData"):
            values = obj.get(field) or {}
            if not isinstance(values, dict):
                raise bad_request(f"{field} must be an object")
            for key, value in values.items():
                if not key or len(key) > 253 or set(key) - _KEY_CHARS:
                    causes.append(
                        {
                            "reason": "FieldValueInvalid",
                            "field": f"{field}[{key}]",
                            "message": f'Invalid value: "{key}": a valid config key must '
                            "consist of alphanumeric characters, '-', '_' or '.'",
                        }
                    )
                if key in seen:
                    causes.append(
                        {
                            "reason": "FieldValueInvalid",
                            "field": f"{field}[{key}]",
                            "message": f'Invalid value: "{key}": duplicate of key '
                            f"present in {'data' if field == 'binaryData' else field}",
                        }
                    )
                seen.add(key)
                binary = field == "binaryData" or resource is SECRETS
                if binary:
                    try:
                        size += len(base64.b64decode(str(value), validate=True))
                    except binascii.Error:
                        raise bad_request(f"illegal base64 data in {field}[{key}]") from None
                else:
                    size += len(key) + len(str(value).encode())
        if size > MAX_DATA_BYTES:
            causes.append(
                {
                    "reason": "FieldValueTooLong",
                    "field": "",
                    "message": f"Too long: must have at most {MAX_DATA_BYTES} bytes",
                }
            )
        return causes

    def _defaults(self, resource: Resource, obj: Obj) -> None:
        if resource is PODS:
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("serviceAccountName", "default")
            spec.setdefault("enableServiceLinks", True)
            for container in spec.get("initContainers", []) + spec.get("containers", []):
                latest = ":" not in container.get("image", "").rsplit("/", 1)[-1]
                latest = latest or container.get("image", "").endswith(":latest")
                container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                container.setdefault("terminationMessagePolicy", "File")
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif resource.key in self.defaulters:
            self.defaulters[resource.key](obj)
        elif resource is SERVICES:
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if not spec.get("clusterIP"):
                spec["clusterIP"] = f"10.96.{random.randint(0, 255)}.{random.randint(1, 254)}"
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            obj["status"] = {"loadBalancer": {}}
        elif resource is SECRETS:
            obj.setdefault("type", "Opaque")

    @staticmethod
    def _details(resource: Resource, name: str, **extra: str) -> dict[str, str]:
        details = {"name": name, "kind": resource.plural, **extra}
        if resource.group:
            details["group"] = resource.group
        return details

    # --- read ----------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj = self.store.get(resource.key, namespace, name)
        if obj is None:
            raise not_found(resource.qualified, name, resource.group, resource.plural)
        return obj

    def list_objects(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        labels: str | None = None,
        fields: str | None = None,
        limit: int = 0,
        cont: str | None = None,
    ) -> Obj:
        """The ``<Kind>List`` of the matching objects, ``limit`` at a time."""
        match_labels = label_selector(labels)
        match_fields = field_selector(fields, resource.field_selectors)
        items, rv = self.store.objects(resource.key, namespace)
        items = [
            o for o in items if match_labels(o["metadata"].get("labels") or {}) and match_fields(o)
        ]
        if cont:
            try:
                after = json.loads(base64.urlsafe_b64decode(cont.encode()))["start"]
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid") from None
            items = [o for o in items if self._sort_key(o) > tuple(after)]
        list_meta: Obj = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            rest = len(items) - limit
            items = items[:limit]
            token = json.dumps({"start": self._sort_key(items[-1])}).encode()
            list_meta["continue"] = base64.urlsafe_b64encode(token).decode()
            list_meta["remainingItemCount"] = rest
        if not resource.custom:
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return {
            "kind": resource.list_kind,
            "apiVersion": resource.api_version,
            "metadata": list_meta,
            "items": items,
        }

    @staticmethod
    def _sort_key(obj: Obj) -> tuple[str, str]:
        return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    # --- update --------------------------------------------------------------------------

    def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        strict: bool = False,
    ) -> tuple[Obj, list[str]]:
        """PUT: replace the object (or only its status, for ``subresource="status"``)."""
        obj = self._check_body(resource, namespace, body)
        meta = obj["metadata"]
        if meta.get("name", name) != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        meta["name"] = name
        with self.store.lock:
            current = self.get(resource, namespace, name)
            wanted_rv = meta.get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object '
                    "has been modified; please apply your changes to the latest version and try "
                    "again",
                    self._details(resource, name),
                )
            warnings: list[str] = []
            if subresource == "status":
                updated = deep(current)
                updated["status"] = obj.get("status")
                if updated["status"] is None:
                    updated.pop("status")
            else:
                for key in _SERVER_META:
                    if key in current["metadata"]:
                        meta[key] = current["metadata"][key]
                    else:
                        meta.pop(key, None)
                if "status" in resource.subresources or resource is PODS:
                    obj.pop("status", None)
                    if "status" in current:
                        obj["status"] = current["status"]
                for mutate in self.mutating.get(resource.key, ()):
                    mutate("UPDATE", obj, deep(current))
                warnings = self._admit(resource, obj, strict=strict, old=current)
                self._check_immutable(resource, current, obj)
                for validate in self.validating.get(resource.key, ()):
                    warnings += validate("UPDATE", obj, deep(current))
                if resource.custom and obj.get("spec") != current.get("spec"):
                    meta["generation"] = current["metadata"].get("generation", 1) + 1
                updated = obj
            if updated == current:
                return current, warnings
            meta = updated["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                self._remove(resource, updated)
                return updated, warnings
            return self.store.put(resource.key, updated), warnings

    def _check_immutable(self, resource: Resource, current: Obj, obj: Obj) -> None:
        if resource not in (CONFIGMAPS, SECRETS) or not current.get("immutable"):
            return
        causes = []
        for field in ("data", "binaryData"):
            if obj.get(field) != current.get(field):
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": field,
                        "message": "Forbidden: field is immutable when `immutable` is set",
                    }
                )
        if not obj.get("immutable"):
            causes.append(
                {
                    "reason": "FieldValueForbidden",
                    "field": "immutable",
                    "message": "Forbidden: field is immutable when `immutable` is set",
                }
            )
        if causes:
            raise invalid(resource.kind, resource.group, obj["metadata"]["name"], causes)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str | None = None,
        strict: bool = False,
    ) -> tuple[Obj, list[str]]:
        """PATCH with a JSON patch, a merge patch or (core kinds only) a strategic merge patch.

        A strategic merge patch is applied as a merge patch (lists are replaced,
        not merged by key).
        """
        kind = content_type.split(";")[0].strip()
        merge_types = ["application/merge-patch+json"]
        if not resource.custom:
            merge_types.append("application/strategic-merge-patch+json")
        with self.store.lock:
            current = self.get(resource, namespace, name)
            if kind == "application/json-patch+json":
                updated = json_patch(current, body)
            elif kind in merge_types:
                updated = merge_patch(current, body)
            else:
                accepted = ", ".join(["application/json-patch+json", *merge_types])
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {accepted}",
                )
            if not isinstance(updated, dict):
                raise bad_request("the patch does not produce an object")
            wanted_rv = (
                (body.get("metadata") or {}).get("resourceVersion")
                if isinstance(body, dict)
                else None
            )
            if not wanted_rv:
                updated.setdefault("metadata", {}).pop("resourceVersion", None)
            return self.replace(
                resource, namespace, name, updated, subresource=subresource, strict=strict
            )

    def mutate(
        self, resource: Resource, namespace: str, name: str, change: Callable[[Obj], Any]
    ) -> Obj | None:
        """Change a stored object in place (controllers: status updates); None if it is gone."""
        return self.store.mutate(resource.key, namespace, name, change)
