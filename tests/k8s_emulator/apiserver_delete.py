"""The API server's deletion: graceful pods, finalizers, propagation, garbage collection.

DELETE with ``propagationPolicy`` Foreground (the owner keeps a
``foregroundDeletion`` finalizer until its blocking dependents are gone),
Background (the default) or Orphan, ``gracePeriodSeconds`` (pods end
gracefully: the kubelet stops them, then the pod is removed),
``preconditions`` and finalizers; every object whose ``ownerReferences`` name
a removed owner is deleted, as the garbage collector does.
"""

from __future__ import annotations

from collections.abc import Mapping

from .meta import ApiError, Obj, bad_request, deep, now
from .resources import NAMESPACES, PODS, Registry, Resource
from .store import Store

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


def owned_by(obj: Obj, uid: str) -> bool:
    """True when one of ``obj``'s ``ownerReferences`` names the object ``uid``."""
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences", ()))


class Deletion:
    """Delete and garbage collection of :class:`~.apiserver.ApiServer` (mixed into it).

    Uses the server's ``store``, ``registry``, ``get``, ``mutate`` and ``_details``.
    """

    store: Store
    registry: Registry

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
