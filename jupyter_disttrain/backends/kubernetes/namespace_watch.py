"""Every Kubeflow job of one namespace, kept current by one watch per kind.

Following many jobs of a namespace (the sidebar's namespace section) costs one
LIST and then one long-lived WATCH per served kind, however many jobs there
are: a listing reads the cache and makes no request. A watch that ends
(server time-out) resumes from the last resource version; one that is too old
(410 Expired) lists again; a kind the cluster does not serve (404) is left out.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from ..base import JobRecord
from . import kinds
from .client import Connection, api_error, transport_error
from .kinds import KubeflowKind
from .records import namespace_record

#: Seconds one watch request stays open before the server ends it (then it resumes).
WATCH_SECONDS = 300


class NamespaceWatch:
    """The jobs of every served kind in ``conn``'s namespace (thread-safe)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, dict[str, Any]]] = {}  # kind -> name -> object
        self._synced: set[str] = set()  # kinds listed at least once (or not served)
        self._stopped = threading.Event()
        self._responses: set[Any] = set()  # the open watch responses (closed by close())

    def start(self) -> NamespaceWatch:
        for kubeflow in kinds.KINDS:
            threading.Thread(
                target=self._follow,
                args=(kubeflow,),
                daemon=True,
                name=f"distrain-ns-{kubeflow.plural}",
            ).start()
        return self

    def records(self) -> list[JobRecord] | None:
        """The jobs as now known, newest first; None until every kind was listed once."""
        with self._lock:
            if len(self._synced) < len(kinds.KINDS):
                return None
            found = [
                (k, obj) for k in kinds.KINDS for obj in self._objects.get(k.kind, {}).values()
            ]
        return sorted((namespace_record(obj, k) for k, obj in found), key=lambda r: -r.created)

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            responses = list(self._responses)
        for response in responses:
            response.close()

    def _list(self, kubeflow: KubeflowKind) -> str | None:
        """List the kind into the cache; its resource version (None: not served)."""
        conn = self.conn
        try:
            listing: Any = conn.custom.list_namespaced_custom_object(
                kubeflow.group, kubeflow.version, conn.namespace, kubeflow.plural
            )
        except api_error() as exc:
            if exc.status == 404:
                with self._lock:
                    self._synced.add(kubeflow.kind)
                return None
            raise
        with self._lock:
            self._objects[kubeflow.kind] = {
                o["metadata"]["name"]: o for o in listing.get("items", [])
            }
            self._synced.add(kubeflow.kind)
        return str(listing.get("metadata", {}).get("resourceVersion") or "") or None

    def _follow(self, kubeflow: KubeflowKind) -> None:
        version: str | None = None
        failures = 0
        while not self._stopped.is_set():
            try:
                if version is None:
                    version = self._list(kubeflow)
                    if version is None:
                        return  # not served here
                version = self._watch(kubeflow, version)
                failures = 0
            except (api_error(), transport_error(), OSError, ValueError):
                if self._stopped.is_set():
                    return
                failures += 1
                version = None
                self._stopped.wait(min(30.0, 0.5 * 2**failures))

    def _watch(self, kubeflow: KubeflowKind, version: str) -> str | None:
        """One watch request from ``version``; the version to resume from (None: list again).

        The response is read here (not through ``kubernetes.watch``) so that :meth:`close`
        can end it at once by closing it.
        """
        conn = self.conn
        response: Any = conn.custom.list_namespaced_custom_object(
            kubeflow.group,
            kubeflow.version,
            conn.namespace,
            kubeflow.plural,
            watch=True,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        with self._lock:
            self._responses.add(response)
        if self._stopped.is_set():
            response.close()
        try:
            for line in _lines(response):
                item = json.loads(line)
                obj = item.get("object") or {}
                if item.get("type") == "ERROR":
                    return None  # 410 Expired: the history no longer reaches back
                version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                name = obj.get("metadata", {}).get("name")
                if item.get("type") == "BOOKMARK" or not name:
                    continue
                with self._lock:
                    objects = self._objects.setdefault(kubeflow.kind, {})
                    if item["type"] == "DELETED":
                        objects.pop(name, None)
                    else:
                        objects[name] = obj
        except (transport_error(), OSError, ValueError, AttributeError):
            if self._stopped.is_set():
                return version
            raise
        finally:
            with self._lock:
                self._responses.discard(response)
            response.close()
            response.release_conn()
        return version


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON lines of a watch response as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending
