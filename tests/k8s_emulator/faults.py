"""Faults on demand: refused or slow requests, unschedulable pods, images that cannot be pulled."""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .meta import ApiError, Obj

DEFAULT_USER = "system:serviceaccount:default:default"
INSUFFICIENT_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@dataclass
class _Refusal:
    code: int  # 401 or 403
    remaining: int | None  # None: until cleared
    verbs: frozenset[str] | None
    resources: frozenset[str] | None
    user: str


@dataclass(frozen=True)
class _Slowness:
    seconds: float
    verbs: frozenset[str] | None
    resources: frozenset[str] | None
    names: str  # a glob of the named object ("*": any, and requests naming none)


def _armed_for(values: Iterable[str] | None) -> frozenset[str] | None:
    """The verbs or resources a fault is armed for (None: any)."""
    return frozenset(values) if values else None


def _covers(
    verbs: frozenset[str] | None, resources: frozenset[str] | None, verb: str, resource: str
) -> bool:
    """Whether a fault armed for ``verbs`` and ``resources`` covers ``verb`` on ``resource``."""
    return (verbs is None or verb in verbs) and (resources is None or resource in resources)


@dataclass(frozen=True)
class RequestInfo:
    """What a request is about, as RBAC sees it."""

    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    resource: str  # plural, "pods/log"...; "" for non-resource paths
    group: str
    namespace: str | None
    name: str | None
    path: str


def forbidden(info: RequestInfo, user: str) -> ApiError:
    """A 403 worded like an RBAC denial."""
    if not info.resource:
        return ApiError(
            403,
            "Forbidden",
            f'forbidden: User "{user}" cannot {info.verb} path "{info.path}"',
        )
    plural = info.resource.split("/")[0]
    qualified = f"{plural}.{info.group}" if info.group else plural
    named = f'{qualified} "{info.name}"' if info.name else qualified
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    details = {"kind": plural, **({"name": info.name} if info.name else {})}
    if info.group:
        details["group"] = info.group
    return ApiError(
        403,
        "Forbidden",
        f'{named} is forbidden: User "{user}" cannot {info.verb} resource "{info.resource}" '
        f'in API group "{info.group}" {scope}',
        details,
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


class Faults:
    """The faults currently armed; the emulator's public fault methods edit this."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refusals: list[_Refusal] = []
        self._unschedulable: list[tuple[str, str | None, str]] = []
        self._pullable: Callable[[str], bool] | None = None
        self._pull_delays: list[tuple[str, float]] = []
        self._slowness: list[_Slowness] = []

    def clear(self) -> None:
        with self._lock:
            self._refusals.clear()
            self._slowness.clear()
            self._unschedulable.clear()
            self._pullable = None
            self._pull_delays = []

    # --- requests ------------------------------------------------------------------------

    def refuse(
        self,
        code: int,
        count: int | None,
        verbs: Iterable[str] | None,
        resources: Iterable[str] | None,
        user: str,
    ) -> None:
        with self._lock:
            self._refusals.append(
                _Refusal(code, count, _armed_for(verbs), _armed_for(resources), user)
            )

    def check(self, info: RequestInfo) -> ApiError | None:
        """The error the next request described by ``info`` must get, if any (uses one up)."""
        with self._lock:
            for refusal in self._refusals:
                if refusal.code == 403 and not info.resource:
                    continue  # discovery stays open to every authenticated user
                if not _covers(refusal.verbs, refusal.resources, info.verb, info.resource):
                    continue
                if refusal.remaining is not None:
                    refusal.remaining -= 1
                    if refusal.remaining <= 0:
                        self._refusals.remove(refusal)
                return unauthorized() if refusal.code == 401 else forbidden(info, refusal.user)
        return None

    def slow(
        self,
        seconds: float,
        verbs: Iterable[str] | None,
        resources: Iterable[str] | None,
        names: str,
    ) -> None:
        with self._lock:
            self._slowness.append(
                _Slowness(seconds, _armed_for(verbs), _armed_for(resources), names)
            )

    def delay(self, info: RequestInfo) -> float:
        """Seconds the server waits before it answers the request described by ``info``."""
        with self._lock:
            return sum(
                s.seconds
                for s in self._slowness
                if _covers(s.verbs, s.resources, info.verb, info.resource)
                and (s.names == "*" or fnmatch.fnmatchcase(info.name or "", s.names))
            )

    def review(self, body: Obj) -> Obj:
        """A SelfSubjectAccessReview answered (``kubectl auth can-i``): denied when an armed
        403 refusal would refuse that request (it is not used up by the question)."""
        attrs = ((body.get("spec") or {}).get("resourceAttributes")) or {}
        resource = str(attrs.get("resource") or "")
        if attrs.get("subresource"):
            resource += f"/{attrs['subresource']}"
        verb = str(attrs.get("verb") or "")
        with self._lock:
            denied = any(
                r.code == 403 and _covers(r.verbs, r.resources, verb, resource)
                for r in self._refusals
            )
        status: Obj = {"allowed": not denied}
        if denied:
            status.update(denied=True, reason="")
        else:
            status["reason"] = 'RBAC: allowed by RoleBinding "edit/default" of ClusterRole "edit"'
        return {
            **body,
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "status": status,
        }

    # --- scheduling ----------------------------------------------------------------------

    def make_unschedulable(self, pods: str, namespace: str | None, message: str) -> None:
        with self._lock:
            self._unschedulable.append((pods, namespace, message))

    def unschedulable(self, pod: Obj) -> str | None:
        """The FailedScheduling message for ``pod``, or None when it can be scheduled."""
        meta = pod["metadata"]
        with self._lock:
            for pattern, namespace, message in self._unschedulable:
                if namespace not in (None, meta.get("namespace")):
                    continue
                if fnmatch.fnmatchcase(meta["name"], pattern):
                    return message
        return None

    # --- images --------------------------------------------------------------------------

    def set_pullable(self, images: Iterable[str] | Callable[[str], bool] | None) -> None:
        if images is None or callable(images):
            check = images
        else:
            patterns = list(images)

            def check(image: str) -> bool:
                return any(fnmatch.fnmatchcase(image, p) for p in patterns)

        with self._lock:
            self._pullable = check

    def pullable(self, image: str) -> bool:
        with self._lock:
            check = self._pullable
        return True if check is None else bool(check(image))

    def set_pull_delay(self, delays: Mapping[str, float] | None) -> None:
        with self._lock:
            self._pull_delays = list((delays or {}).items())

    def pull_delay(self, image: str) -> float:
        """Seconds pulling ``image`` takes (the first matching glob; 0: it is present)."""
        with self._lock:
            found = (s for p, s in self._pull_delays if fnmatch.fnmatchcase(image, p))
            return float(next(found, 0.0))
