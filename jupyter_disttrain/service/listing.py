"""Jobs of several backends: each asked with an optional time limit, clusters' answers cached.

A :class:`Lister` asks one backend at a time for its jobs. A backend that
fails, or does not answer within the policy's time limit, is an error entry
of that backend and the others are still listed. A call still in flight is
not started again: the next listing waits on the same answer. Answers of a
backend are reused for as long as the policy says (a cluster's API server is
spared a list per poll); :meth:`Lister.forget` drops one after an action
changed it. Thread-safe.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..backends.base import Backend, JobRecord

#: Seconds a backend may take to list its jobs before it is reported as not answering.
LIST_TIMEOUT = 5.0
#: Reuse a listing of a backend that needs configuration (a cluster) for this long: spare
#: its API server a list per poll. Other backends (reading local files) are listed each time.
CLUSTER_CACHE_SECONDS = 3.0


@dataclass(frozen=True)
class ListPolicy:
    """How a process lists: ``timeout`` None waits for every answer.

    ``cache_seconds`` None: clusters' answers are reused for
    :data:`CLUSTER_CACHE_SECONDS`, others never; a mapping gives the seconds
    by backend name (0 for a name it lacks). ``keep_backends``: the first
    instance of each backend name is kept and used from then on (its
    followers and caches stay), rather than the one each call is given.
    ``configured``: list every configured backend (a cluster with a
    kubeconfig), not only those this process's jobs use.
    """

    timeout: float | None = None
    cache_seconds: Mapping[str, float] | None = field(default_factory=dict)
    keep_backends: bool = False
    configured: bool = False


#: A kernel or a command: every backend answers in its own time, nothing reused.
ONE_SHOT = ListPolicy()
#: A server polled by a sidebar: every configured backend, time limits, clusters' answers
#: reused, instances kept.
POLLED = ListPolicy(timeout=LIST_TIMEOUT, cache_seconds=None, keep_backends=True, configured=True)


@dataclass
class BackendListing:
    """One backend's jobs as listed at ``at`` (monotonic), or the ``error`` that hid them."""

    records: list[JobRecord]
    error: str
    at: float


@dataclass
class Listing:
    """Jobs of several backends, newest first, and the backends that could not be asked.

    ``backends`` are the backends asked, in order (the ones in ``errors`` too).
    """

    records: list[JobRecord] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    diagnoses: dict[tuple[str, str], str | None] = field(default_factory=dict)
    backends: list[Backend] = field(default_factory=list)
    _sources: dict[int, Backend] = field(default_factory=dict, repr=False)

    def add(self, backend: Backend, records: Iterable[JobRecord]) -> None:
        """Add ``records`` as listed by ``backend`` (see :meth:`source`)."""
        for record in records:
            self.records.append(record)
            self._sources[id(record)] = backend

    def source(self, record: JobRecord) -> Backend:
        """The backend that listed ``record`` (whatever backend name the record itself says)."""
        return self._sources[id(record)]

    def diagnosis(self, record: JobRecord) -> str | None:
        """The diagnosis found for ``record`` (None when none was asked or there is none)."""
        return self.diagnoses.get((record.backend, record.name))


def when(created: object) -> float:
    """A record's creation time to sort by (0 for one that is not a finite number)."""
    if isinstance(created, int | float) and math.isfinite(created):
        return float(created)
    return 0.0


def newest_first(records: Iterable[JobRecord]) -> list[JobRecord]:
    """``records`` sorted newest first; one with a malformed creation time sorts last."""
    return sorted(records, key=lambda r: -when(r.created))


class Lister:
    """Lists backends under one :class:`ListPolicy`; see the module docstring."""

    def __init__(self, policy: ListPolicy = ONE_SHOT) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._kept: dict[str, Backend] = {}
        self._listings: dict[str, BackendListing] = {}
        self._inflight: dict[str, cf.Future[list[JobRecord]]] = {}
        self._pool: cf.ThreadPoolExecutor | None = None

    def keep(self, backends: Iterable[Backend]) -> list[Backend]:
        """``backends``, each replaced by the kept instance of its name when the policy keeps."""
        if not self.policy.keep_backends:
            return list(backends)
        with self._lock:
            return [self._kept.setdefault(b.name, b) for b in backends]

    def ttl(self, backend: Backend) -> float:
        """Seconds an answer of ``backend`` is reused."""
        if self.policy.cache_seconds is None:
            return CLUSTER_CACHE_SECONDS if backend.capabilities.needs_setup else 0.0
        return self.policy.cache_seconds.get(backend.name, 0.0)

    def listing(self, backend: Backend) -> BackendListing:
        """``backend``'s jobs: a fresh enough cached answer, else asked now (within the limit)."""
        now = time.monotonic()
        timeout = self.policy.timeout
        with self._lock:
            cached = self._listings.get(backend.name)
            if cached is not None and not cached.error and now - cached.at < self.ttl(backend):
                return cached
            future = None
            if timeout is not None:
                future = self._inflight.get(backend.name)
                if future is None or future.done():
                    if self._pool is None:
                        self._pool = cf.ThreadPoolExecutor(4, thread_name_prefix="distrain-list")
                    future = self._pool.submit(backend.list_jobs)
                    self._inflight[backend.name] = future
        try:
            records = backend.list_jobs() if future is None else future.result(timeout=timeout)
            listing = BackendListing(list(records), "", now)
        except cf.TimeoutError:
            listing = BackendListing([], f"no answer within {timeout:g} s", now)
        except Exception as exc:  # any failure of one backend stays its own
            listing = BackendListing([], str(exc) or type(exc).__name__, now)
        with self._lock:
            self._listings[backend.name] = listing
        return listing

    def cached(self, name: str) -> BackendListing | None:
        """The last answer of backend ``name`` (None before its first listing)."""
        with self._lock:
            return self._listings.get(name)

    def forget(self, name: str) -> None:
        """Drop backend ``name``'s cached answer: an action changed its jobs."""
        with self._lock:
            self._listings.pop(name, None)

    def close(self) -> None:
        """Stop the listing threads (a call in flight is abandoned)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
