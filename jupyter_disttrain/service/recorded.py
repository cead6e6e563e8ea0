"""A job's view record: its follower's snapshot, signed, so other processes show the job
without reading its lines again.

The process that follows a job (the kernel or ``disttrain run`` that submitted
it) parses and verifies every line once; its :class:`Recorder` writes the
monitor's :class:`~jupyter_disttrain.monitor.Snapshot` to ``view.json`` in the
job's view directory (a local job's own directory; for a job of remote workers a
directory here, :class:`KeepsViews`) at most every :data:`RECORD_SECONDS` while the
job runs, and once more at its end. A running job's record older than
:data:`STALE_SECONDS` is not believed current: its follower is gone. The
sidebar's server reads that record (:class:`RecordedView`) instead of following
the job's logs with a monitor of its own.

Trust: the record changes what the sidebar shows of a job, so it is read only
when the file and its directory belong to this user and are writable by nobody
else, its first line is the HMAC-SHA256 of the rest under the job key's
``view`` subkey, and the rest is a snapshot with every field of its type
(:func:`~jupyter_disttrain.monitor.checked.checked_snapshot`). Anything else
is a :class:`RecordError`, and the reader follows the job's signed lines itself.

A job nobody follows to its end (its kernel died, or it ended before a
recorder existed) is recorded by the first process that replays it to the end
(:func:`record_at_end`), so later readers need not replay it again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..backends.base import Backend, EventFeed
from ..events import TERMINAL_STATES, Event
from ..job import Job
from ..monitor import JobMonitor, Snapshot
from ..monitor.checked import ShapeError, checked_snapshot
from ..runtime import jobkey
from ..runtime.checkpoint.storage import makedirs_private
from ..runtime.files import replace_file
from ..spec import JobSpec

#: The record's file name in a job directory.
VIEW_FILE = "view.json"
#: Seconds between writes while a job runs (longer when a write takes long: see Recorder).
RECORD_SECONDS = 1.0
#: A write takes at most this share of the recorder's time (a record of 8,192 ranks, ~3 MB,
#: takes ~0.17 s to make and write: one every ~8 s, 2 % of a core of the kernel).
WRITE_SHARE = 0.02
#: Seconds after which a running job's record is no longer believed current (its
#: follower writes it every :data:`RECORD_SECONDS`, or seldomer when a write is slow).
STALE_SECONDS = 30.0


class RecordError(ValueError):
    """A view record that may not be believed: the message says why."""


class JobView(Protocol):
    """What shows a followed job: a monitor, or the record its follower writes."""

    def snapshot(self, now: float | None = None) -> Snapshot:
        """A JSON-able summary of everything shown."""
        ...


@runtime_checkable
class KeepsViews(Protocol):
    """A backend whose followed jobs' views can be recorded on this machine: a local job's
    directory, or a directory here for a job of remote workers."""

    def view_directory(self, name: str, spec: JobSpec | None = None) -> str:
        """The directory for job ``name``'s record (``spec``: the job as submitted, when
        its options choose where it runs); it may not exist yet."""
        ...

    def stored_key(self, name: str) -> bytes | None:
        """Job ``name``'s key as this user stored it; None when there is none."""
        ...


def view_path(backend: object, name: str, spec: JobSpec | None = None) -> Path | None:
    """Where job ``name`` of ``backend`` keeps its record; None for a backend that records
    no views here."""
    if not isinstance(backend, KeepsViews):
        return None
    return Path(backend.view_directory(name, spec)) / VIEW_FILE


def view_place(backend: object, name: str, *, existing: bool = False) -> tuple[Path, bytes] | None:
    """Where job ``name`` keeps its record and the key that signs it; None for a backend
    that records no views here, a job without a stored key, or (``existing``) a record not
    written yet. The key is asked for only then (a remote job's key takes a request)."""
    path = view_path(backend, name)
    if path is None or (existing and not path.exists()):
        return None
    assert isinstance(backend, KeepsViews)
    key = backend.stored_key(name)
    return None if key is None else (path, key)


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(jobkey.subkey(key, "view"), body, hashlib.sha256).hexdigest()


def write_record(path: Path, key: bytes, snapshot: Snapshot) -> None:
    """Write ``snapshot`` signed with ``key`` to ``path`` (readers see the old or the new)."""
    body = json.dumps(snapshot, separators=(",", ":")).encode()
    replace_file(path, _mac(key, body).encode() + b"\n" + body, prefix=".view-")


def read_record(path: Path, key: bytes) -> Snapshot | None:
    """The snapshot recorded at ``path``; None when there is none. Raises :class:`RecordError`
    for a record not to be believed (see the module's docstring)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"{path} cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        _check_owned(os.fstat(fh.fileno()), path)
        _check_owned(os.stat(path.parent), path.parent)
        data = fh.read()
    mac, _, body = data.partition(b"\n")
    if not hmac.compare_digest(mac, _mac(key, body).encode()):
        raise RecordError(f"{path} is not signed with the job's key")
    try:
        return checked_snapshot(json.loads(body))
    except (ValueError, ShapeError) as exc:
        raise RecordError(f"{path} holds no snapshot: {exc}") from None


def _check_owned(info: os.stat_result, path: Path) -> None:
    if info.st_uid != os.getuid():
        raise RecordError(f"{path} belongs to another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RecordError(f"{path} is writable by other users (mode {info.st_mode & 0o777:o})")


class RecordedView:
    """A job shown from its record, read again whenever the file changed."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self.key = key
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._snapshot: Snapshot | None = None

    @classmethod
    def open(cls, backend: Backend, name: str) -> RecordedView | None:
        """The view of job ``name``'s record; None when there is no record here or the job
        has no key (the key is asked for only then)."""
        place = view_place(backend, name, existing=True)
        return None if place is None else cls(*place)

    def snapshot(self, now: float | None = None) -> Snapshot:
        """The latest record (as its follower saw the job when it wrote it; ``now`` unused).

        Raises :class:`RecordError` when there is none or it may not be believed.
        """
        with self._lock:
            try:
                info = os.stat(self.path)
            except OSError:
                info = None
            seen = None if info is None else (info.st_mtime_ns, info.st_size)
            if self._snapshot is None or seen != self._seen:
                found = read_record(self.path, self.key)
                if found is None:
                    raise RecordError(f"{self.path} does not exist")
                self._snapshot, self._seen = found, seen
            return self._snapshot

    def current(self, state: str, now: float | None = None) -> bool:
        """Whether the record shows a job listed in ``state``: it ended, or the job runs on
        and its follower wrote the record within :data:`STALE_SECONDS` (a follower that
        died, a kernel restarted, leaves a record that is no longer). False when unreadable
        or not to be believed."""
        try:
            recorded = self.snapshot()["state"]
        except RecordError:
            return False
        if recorded in TERMINAL_STATES:
            return True
        with self._lock:  # the file's (mtime, size) the snapshot was read or checked at
            written = self._seen[0] / 1e9 if self._seen is not None else 0.0
        fresh = (time.time() if now is None else now) - written <= STALE_SECONDS
        return state not in TERMINAL_STATES and fresh


def write_pause(took: float) -> float:
    """Seconds to wait after a write that took ``took`` s of the writing thread's CPU:
    :data:`RECORD_SECONDS`, longer so writes take at most :data:`WRITE_SHARE` of a core,
    but never so long that readers would take the record for a dead follower's (a third
    of :data:`STALE_SECONDS`). CPU, not wall time: a write that waited for the GIL or a
    CPU while the kernel was busy did no more work."""
    return min(max(RECORD_SECONDS, took / WRITE_SHARE), STALE_SECONDS / 3)


class Recorder:
    """Writes a followed job's record from its monitor until the job ends.

    A background thread writes every :data:`RECORD_SECONDS` (more seldom when
    a write's CPU takes longer than :data:`WRITE_SHARE` of that) and at once after
    :meth:`on_event` saw the job end; then it stops.
    """

    def __init__(self, monitor: JobMonitor, path: Path, key: bytes) -> None:
        self.monitor = monitor
        self.path = path
        self.key = key
        self.error: str = ""
        self._wake = threading.Event()
        self._done = threading.Event()
        self._retired = threading.Event()
        self._thread = threading.Thread(target=self._run, name="distrain-record", daemon=True)

    def start(self) -> None:
        """Start writing."""
        self._thread.start()

    def on_event(self, event: Event) -> None:
        """A listener of the job: write at once when the job ended."""
        if event.kind == "job" and event.fields.get("state") in TERMINAL_STATES:
            self._wake.set()

    def close(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the final record; True once it is written."""
        return self._done.wait(seconds)

    def retire(self, seconds: float = 10.0) -> bool:
        """Write no more (a new run of the job takes its directory); wait up to ``seconds``
        for a write under way. True once the writer stopped."""
        self._retired.set()
        self._wake.set()
        return self._done.wait(seconds)

    def _run(self) -> None:
        try:
            pause = RECORD_SECONDS
            while not self._retired.is_set():
                ended = self.monitor.ended
                started = time.thread_time()
                write_record(self.path, self.key, self.monitor.snapshot())
                pause = write_pause(time.thread_time() - started)
                if ended:
                    return
                self._wake.wait(pause)
                self._wake.clear()
        except OSError as exc:  # the directory is gone: readers follow the job's lines
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"
        finally:
            self._done.set()


def retire(recorder: Recorder | None) -> None:
    """Stop an earlier run's recorder (if any) before a new run of its job takes the job's
    directory: its last record is not written into the new run's."""
    if recorder is not None:
        recorder.retire()


def record_view(job: Job) -> Recorder | None:
    """Record the view of ``job``, submitted or attached by this process, where other
    processes read it (backends that record views here, a job whose key is known here);
    its closer waits for the final record."""
    path = view_path(job.backend, job.name, job.spec)
    if path is None:
        return None
    assert isinstance(job.backend, KeepsViews)
    key = job.plan.payload.key if job.plan is not None else job.backend.stored_key(job.name)
    if key is None:
        return None
    try:
        makedirs_private(str(path.parent))
    except OSError:  # not ours to write: readers follow the job's lines
        return None
    recorder = Recorder(job.monitor, path, key)
    job.add_listener(recorder.on_event)
    job.add_closer(recorder.close)
    recorder.start()
    return recorder


def record_at_end(monitor: JobMonitor, path: Path, key: bytes) -> EventFeed:
    """A sink for a replay: feeds ``monitor`` and records the job once it ended."""

    def many(events: Sequence[Event]) -> None:
        monitor.feed_many(events)
        if any(
            event.kind == "job" and event.fields.get("state") in TERMINAL_STATES for event in events
        ):
            try:
                write_record(path, key, monitor.snapshot())
            except OSError:  # not ours to write: the next reader replays it again
                pass

    return EventFeed(many)
