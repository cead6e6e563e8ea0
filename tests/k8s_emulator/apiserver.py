"""The API server's object semantics, shared by the HTTP handlers and the controllers.

Create (names, generateName, validation, server-set metadata), get, list
(selectors, pagination), replace and patch (optimistic concurrency, status
subresource, immutable ConfigMaps/Secrets), delete (graceful pod deletion,
finalizers, Foreground/Background/Orphan propagation through
ownerReferences, as the garbage collector does) and Events.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import string
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import schema
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
from .resources import CONFIGMAPS, EVENTS, NAMESPACES, PODS, SECRETS, SERVICES, Registry, Resource
from .store import Store

MAX_DATA_BYTES = 1024 * 1024
#: client-go's event spam filter: Events one source may report about one object at once...
EVENT_BURST = 25
#: ...and how often one more is allowed after that.
EVENT_REFILL_SECONDS = 300.0
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
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


def owned_by(obj: Obj, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences", ()))


#: A mutating admission webhook: ``(operation, object, old object)``; changes the object in
#: place, or raises an :class:`ApiError` to deny the request.
Mutator = Callable[[str, Obj, Obj | None], None]
#: A validating admission webhook: returns warnings, or raises an :class:`ApiError` to deny.
Validator = Callable[[str, Obj, Obj | None], list[str]]
#: Validation inside the API server (a CRD's CEL rules): 422 causes for ``(object, old)``.
Rules = Callable[[Obj, Obj | None], list[Obj]]


class ApiServer:
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
        self._spam_filter = SpamFilter(EVENT_BURST, EVENT_REFILL_SECONDS)
        self._events: dict[tuple[Any, ...], str] = {}  # repeat key -> Event name
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

    # --- delete --------------------------------------------------------------------------

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        grace: int | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> tuple[int, Obj]:
        """DELETE: the HTTP status and body (the object, or a ``Status``)."""
        with self.store.lock:
            obj = self.get(resource, namespace, name)
            meta = obj["metadata"]
            for key, value in (preconditions or {}).items():
                field = {"uid": "uid", "resourceVersion": "resourceVersion"}.get(key)
                if field and value and meta.get(field) != value:
                    raise ApiError(
                        409,
                        "Conflict",
                        f"Precondition failed: {key} in precondition: {value}, {key} in "
                        f"object meta: {meta.get(field)}",
                        self._details(resource, name),
                    )
            if dry_run:
                return 200, obj
            policy = propagation or "Background"
            if policy not in ("Foreground", "Background", "Orphan"):
                raise bad_request(f"propagationPolicy {policy!r} is not supported")
            finalizers = list(meta.get("finalizers", []))
            if policy == "Foreground" and self._blocking(meta["uid"]):
                finalizers.append(FOREGROUND)
            elif policy == "Orphan":
                finalizers.append(ORPHAN)
            finalizers = list(dict.fromkeys(finalizers))
            if resource is PODS:
                grace = self._pod_grace(obj, grace)
            else:
                grace = 0
            if not finalizers and grace == 0:
                self._remove(resource, obj)
                if resource is PODS:
                    return 200, obj
                details = self._details(resource, name, uid=meta["uid"])
                return 200, {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }

            def mark(o: Obj) -> None:
                m = o["metadata"]
                m.setdefault("deletionTimestamp", now())
                # A shorter grace period (the kubelet's final delete) replaces a longer one.
                if m.get("deletionGracePeriodSeconds") is None or grace < int(
                    m["deletionGracePeriodSeconds"]
                ):
                    m["deletionGracePeriodSeconds"] = grace
                if finalizers:
                    m["finalizers"] = finalizers

            already = bool(meta.get("deletionTimestamp"))
            marked = self.mutate(resource, namespace, name, mark) or obj
            if not already:
                if ORPHAN in finalizers:
                    self._orphan(resource, marked)
                elif FOREGROUND in finalizers:
                    self._collect(marked["metadata"]["uid"])
                    if not self._blocking(marked["metadata"]["uid"]):
                        self._drop_finalizer(resource, marked, FOREGROUND)
            return 200, marked

    def drop_finalizer(
        self, resource: Resource, namespace: str, name: str, finalizer: str
    ) -> Obj | None:
        """Remove a controller's finalizer; an object being deleted goes once none is left
        (a pod only once its graceful termination has ended: grace period 0)."""

        def drop(obj: Obj) -> None:
            left = [f for f in obj["metadata"].get("finalizers", []) if f != finalizer]
            if left:
                obj["metadata"]["finalizers"] = left
            else:
                obj["metadata"].pop("finalizers", None)

        with self.store.lock:
            updated = self.mutate(resource, namespace, name, drop)
            if updated is None:
                return None
            meta = updated["metadata"]
            terminated = (
                resource is not PODS or int(meta.get("deletionGracePeriodSeconds") or 0) == 0
            )
            if meta.get("deletionTimestamp") and not meta.get("finalizers") and terminated:
                self._remove(resource, updated)
            return updated

    def _pod_grace(self, pod: Obj, grace: int | None) -> int:
        """Unscheduled and finished pods go at once; others after the kubelet stops them."""
        if not pod["spec"].get("nodeName"):
            return 0
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        return max(grace, 0)

    def _dependents(self, uid: str) -> list[tuple[Resource, Obj]]:
        with self.store.lock:
            found = []
            for key, obj in self.store.scan():
                if owned_by(obj, uid):
                    resource = self._resource_of(key)
                    if resource is not None:
                        found.append((resource, deep(obj)))
            return found

    def _blocking(self, uid: str) -> bool:
        """Whether a dependent of ``uid`` blocks its owner's foreground deletion."""
        return any(
            ref.get("uid") == uid and ref.get("blockOwnerDeletion")
            for _, dependent in self._dependents(uid)
            for ref in dependent["metadata"].get("ownerReferences", [])
        )

    def _resource_of(self, key: str) -> Resource | None:
        for resource in self.registry.all():
            if resource.key == key:
                return resource
        return None

    def _remove(self, resource: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        removed = self.store.remove(resource.key, meta.get("namespace", ""), meta["name"])
        if removed is None:
            return
        if resource is NAMESPACES:
            self._empty_namespace(meta["name"])
        self._collect(meta["uid"])
        self._release_owners(removed)

    def _empty_namespace(self, namespace: str) -> None:
        for resource in self.registry.all():
            if resource.namespaced:
                items, _ = self.store.objects(resource.key, namespace)
                for item in items:
                    self.delete(resource, namespace, item["metadata"]["name"], grace=0)

    def _collect(self, uid: str) -> None:
        """Garbage-collect the dependents of ``uid`` (owner gone, or being deleted in front)."""
        owner_alive = any(
            o["metadata"].get("uid") == uid and not o["metadata"].get("deletionTimestamp")
            for _, o in self.store.scan()
        )
        if owner_alive:
            return
        for resource, dependent in self._dependents(uid):
            meta = dependent["metadata"]
            if self.store.get(resource.key, meta.get("namespace", ""), meta["name"]) is None:
                continue  # gone meanwhile: removing an earlier one ended the owner's deletion
            others = [r for r in meta.get("ownerReferences", []) if r.get("uid") != uid]
            if any(self._exists(ref["uid"]) for ref in others):
                self._disown(resource, dependent, uid)
            elif not meta.get("deletionTimestamp"):
                self.delete(resource, meta.get("namespace", ""), meta["name"])

    def _exists(self, uid: str) -> bool:
        return any(o["metadata"].get("uid") == uid for _, o in self.store.scan())

    def _orphan(self, resource: Resource, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        for dep_resource, dependent in self._dependents(uid):
            self._disown(dep_resource, dependent, uid)
        self._drop_finalizer(resource, owner, ORPHAN)

    def _disown(self, resource: Resource, dependent: Obj, uid: str) -> None:
        """Remove ``dependent``'s ownerReferences to ``uid``."""

        def drop(obj: Obj) -> None:
            meta = obj["metadata"]
            refs = [r for r in meta.get("ownerReferences", []) if r.get("uid") != uid]
            if refs:
                meta["ownerReferences"] = refs
            else:
                meta.pop("ownerReferences", None)

        meta = dependent["metadata"]
        self.mutate(resource, meta.get("namespace", ""), meta["name"], drop)

    def _release_owners(self, removed: Obj) -> None:
        """A dependent is gone: finish the foreground deletion of owners it was blocking."""
        for ref in removed["metadata"].get("ownerReferences", []):
            for key, owner in list(self.store.scan()):
                meta = owner["metadata"]
                if meta.get("uid") != ref.get("uid") or FOREGROUND not in meta.get(
                    "finalizers", []
                ):
                    continue
                if self._blocking(meta["uid"]):
                    continue
                resource = self._resource_of(key)
                if resource is not None:
                    self._drop_finalizer(resource, deep(owner), FOREGROUND)

    def _drop_finalizer(self, resource: Resource, owner: Obj, finalizer: str) -> None:
        meta = owner["metadata"]

        def drop(o: Obj) -> None:
            o["metadata"]["finalizers"] = [
                f for f in o["metadata"].get("finalizers", []) if f != finalizer
            ]
            if not o["metadata"]["finalizers"]:
                del o["metadata"]["finalizers"]

        updated = self.mutate(resource, meta.get("namespace", ""), meta["name"], drop)
        if updated is not None and not updated["metadata"].get("finalizers"):
            self._remove(resource, updated)

    # --- events --------------------------------------------------------------------------

    def record_event(
        self,
        involved: Obj,
        event_type: str,
        reason: str,
        message: str,
        component: str,
        *,
        host: str | None = None,
        field_path: str | None = None,
    ) -> Obj | None:
        """Record an Event about ``involved`` the way client-go's recorder does.

        A repeat (same object, type, reason, message, source) bumps the
        ``count`` of the existing Event. The recorder's spam filter applies:
        each source may report :data:`EVENT_BURST` Events about one object,
        then one per :data:`EVENT_REFILL_SECONDS`; the others are dropped
        (None is returned).
        """
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        spam_key = (component, host, involved.get("kind"), namespace, meta["name"], meta.get("uid"))
        if not self._spam_filter.allow(spam_key):
            return None
        ref = {
            "kind": involved.get("kind"),
            "namespace": namespace,
            "name": meta["name"],
            "uid": meta.get("uid"),
            "apiVersion": involved.get("apiVersion"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        if field_path:
            ref["fieldPath"] = field_path
        stamp = now()
        key = (*spam_key, field_path, event_type, reason, message)
        with self.store.lock:
            existing = self._events.get(key)
            if existing is not None:

                def bump(event: Obj) -> None:
                    event["count"] = event.get("count", 1) + 1
                    event["lastTimestamp"] = stamp

                bumped = self.mutate(EVENTS, namespace, existing, bump)
                if bumped is not None:
                    return bumped
            source = {"component": component, **({"host": host} if host else {})}
            name = f"{meta['name']}.{time.time_ns():x}"
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "source": source,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "type": event_type,
                "eventTime": None,
                "reportingComponent": component,
                "reportingInstance": host or "",
            }
            self._stamp(EVENTS, event)
            self._events[key] = name
            return self.store.add(EVENTS.key, event)


class SpamFilter:
    """A token bucket per key: ``burst`` tokens, refilled at one per ``refill`` seconds."""

    def __init__(self, burst: int, refill: float) -> None:
        self.burst, self.refill = burst, refill
        self._buckets: dict[Any, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: Any) -> bool:
        with self._lock:
            clock = time.monotonic()
            tokens, last = self._buckets.get(key, (float(self.burst), clock))
            tokens = min(float(self.burst), tokens + (clock - last) / self.refill)
            if tokens < 1:
                self._buckets[key] = (tokens, clock)
                return False
            self._buckets[key] = (tokens - 1, clock)
            return True
