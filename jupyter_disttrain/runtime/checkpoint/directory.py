"""One checkpoint directory: list, commit, verify, read and remove checkpoints.

The I/O half of :mod:`.format`, shared by the workers
(:mod:`.api`) and the notebook (:mod:`jupyter_disttrain.checkpoints.store`).
Standard library only (fsspec for URLs, through :mod:`.storage`).
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
import time
from collections.abc import Iterable
from typing import Any

from . import format as fmt
from .storage import FileSystem, LocalFS, open_fs

#: Rewrite the manifest once this many records are not in it yet.
COMPACT_AFTER = 16
#: Leftover temporary files older than this are removed by :meth:`CheckpointDir.sweep`.
STALE_TMP_SECONDS = 3600.0
CHUNK = 1 << 20


class CheckpointDir:
    """A checkpoint directory at ``uri`` (a path or fsspec URL); see :mod:`.format`."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self.fs: FileSystem
        self.fs, self.root = open_fs(uri, storage_options)
        self.uri = self.fs.uri(self.root)
        self._entries_dir = self.fs.join(self.root, fmt.ENTRIES_DIR)
        self._manifest = self.fs.join(self.root, fmt.MANIFEST)

    # -- reading ---------------------------------------------------------------
    def records(self) -> tuple[dict[str, fmt.Entry], int]:
        """Every committed record by entry name, and how many are not in the manifest yet."""
        names = self.fs.names(self._entries_dir)
        cached = fmt.decode_manifest(self.fs.read_bytes(self._manifest))
        known, missing = fmt.reconcile(names, cached)
        lag = len(missing) + len(cached) - len(known)  # new records + deleted ones
        for name in missing:
            data = self.fs.read_bytes(self.fs.join(self._entries_dir, name))
            if data is not None:  # deleted meanwhile otherwise
                known[name] = fmt.decode_entry(data, name)
        return known, lag

    def entries(self, *, compact: bool = False) -> list[fmt.Entry]:
        """Checkpoints sorted by step, one per step, each with ``status``, ``reason``, ``uri``.

        One listing of ``entries/``, one read of the manifest, one listing of
        the directory (for sizes) and a read per record not in the manifest.
        With ``compact``, rewrite the manifest when it lags.
        """
        records, lag = self.records()
        if compact and lag >= COMPACT_AFTER:
            self.compact(records)
        entries, _ = fmt.newest_per_step(records)
        sizes = self.fs.listdir(self.root)
        for entry in entries:
            status, reason = fmt.status_of(entry, sizes)
            entry["status"], entry["reason"] = status, reason
            entry["uri"] = self.payload_uri(entry)
        return entries

    def payload_path(self, entry: fmt.Entry) -> str:
        return self.fs.join(self.root, str(entry["path"]))

    def payload_uri(self, entry: fmt.Entry) -> str:
        return self.fs.uri(self.payload_path(entry))

    def verify(self, entry: fmt.Entry) -> tuple[str, str]:
        """``(status, reason)`` after checking every file's size and sha256 (reads the data)."""
        if entry.get("status") == fmt.CORRUPT:
            return fmt.CORRUPT, str(entry.get("reason", ""))
        try:
            if fmt.is_folder(entry):  # a folder of files
                return self._verify_sharded(entry)
            data = self.fs.read_bytes(self.payload_path(entry))
        except OSError as exc:
            return fmt.INCOMPLETE, f"{entry['path']}: {exc}"
        if data is None:
            return fmt.INCOMPLETE, f"{entry['path']} is missing"
        return check_bytes(entry, data)

    def read_verified(self, entry: fmt.Entry) -> bytes:
        """A full checkpoint's bytes, checked; raise :class:`CorruptCheckpoint` if damaged."""
        if entry.get("status") == fmt.CORRUPT:
            raise fmt.CorruptCheckpoint(f"step {entry['step']}: {entry.get('reason')}")
        data = self.fs.read_bytes(self.payload_path(entry))
        if data is None:
            raise fmt.CorruptCheckpoint(
                f"checkpoint step {entry['step']} is incomplete: {entry['path']} is missing "
                f"from {self.uri}"
            )
        status, reason = check_bytes(entry, data)
        if status != fmt.OK:
            raise fmt.CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
        return data

    def _verify_sharded(self, entry: fmt.Entry) -> tuple[str, str]:
        folder = self.payload_path(entry)
        sizes = self.fs.listdir(folder)
        for name, (nbytes, digest) in dict(entry.get("files", {})).items():
            nested = "/" in name  # a file in a subfolder (an orbax checkpoint's)
            found = self.fs.read_bytes(self.fs.join(folder, name)) if nested else None
            if (name not in sizes) if not nested else found is None:
                return fmt.INCOMPLETE, f"{entry['path']}/{name} is missing"
            data = (found if nested else self.fs.read_bytes(self.fs.join(folder, name))) or b""
            if len(data) != nbytes or hashlib.sha256(data).hexdigest() != digest:
                return fmt.CORRUPT, f"{entry['path']}/{name}: checksum mismatch"
        return fmt.OK, ""

    # -- writing ---------------------------------------------------------------
    def prepare(self) -> None:
        """Create the directory and its record folder."""
        self.fs.makedirs(self.root)
        self.fs.makedirs(self._entries_dir)

    def commit(self, entry: fmt.Entry) -> fmt.Entry:
        """Record a fully written checkpoint (the commit point); drop older records of its step."""
        name = fmt.entry_name(int(entry["step"]), str(entry["id"]))
        try:
            self.fs.write_bytes(self.fs.join(self._entries_dir, name), fmt.encode_entry(entry))
        except BaseException:
            if entry.get("path"):  # never listed: give its space back
                self.fs.remove(self.payload_path(entry))
            raise
        records, lag = self.records()
        _, shadowed = fmt.newest_per_step(records)
        for old in shadowed:
            self._remove_record(old, records.pop(old))
        if lag >= COMPACT_AFTER or shadowed:
            with contextlib.suppress(OSError):  # committed already; a lagging manifest is read
                self.compact(records)  # around (and rewritten by the next commit)
        return dict(entry, entry=name)

    def compact(self, records: dict[str, fmt.Entry] | None = None) -> None:
        """Rewrite the manifest from the records (atomic; a lost race is repaired on read)."""
        if records is None:
            records, _ = self.records()
        self.fs.write_bytes(self._manifest, fmt.encode_manifest(records))

    def remove(self, entries: Iterable[fmt.Entry]) -> int:
        """Delete checkpoints: record first (so they are never listed half-deleted), then data."""
        count = 0
        for entry in entries:
            name = entry.get("entry") or fmt.entry_name(int(entry["step"]), str(entry["id"]))
            self._remove_record(str(name), entry)
            count += 1
        if count:
            self.compact()
        return count

    def _remove_record(self, name: str, entry: fmt.Entry) -> None:
        self.fs.remove(self.fs.join(self._entries_dir, name))
        if entry.get("path"):
            self.fs.remove(self.payload_path(entry))

    def prune(
        self,
        keep_last: int | None,
        keep_best: str | None = None,
        protect: Iterable[str] = (),
    ) -> list[fmt.Entry]:
        """Apply retention (see :func:`.format.to_prune`); return what was removed."""
        victims = fmt.to_prune(self.entries(), keep_last, keep_best, protect)
        self.remove(victims)
        return victims

    def sweep(self, older_than: float = STALE_TMP_SECONDS) -> list[str]:
        """Remove temporary leftovers of crashed writers (older than ``older_than`` s)."""
        removed = []
        now = time.time()
        for folder in (self.root, self._entries_dir, self.fs.join(self.root, fmt.META_DIR)):
            for name in self.fs.listdir(folder):
                if not name.startswith(fmt.TMP_PREFIX):
                    continue
                path = self.fs.join(folder, name)
                stamp = self.fs.mtime(path)
                if stamp is not None and now - stamp >= older_than:
                    self.fs.remove(path)
                    removed.append(path)
        return removed

    @property
    def local(self) -> bool:
        """True for a directory on this machine."""
        return isinstance(self.fs, LocalFS)


def check_bytes(entry: fmt.Entry, data: bytes) -> tuple[str, str]:
    """``(status, reason)`` of a full checkpoint's bytes against its record."""
    if len(data) != entry.get("bytes"):
        return fmt.CORRUPT, f"{entry['path']} has {len(data)} bytes, expected {entry.get('bytes')}"
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        return fmt.CORRUPT, f"{entry['path']}: sha256 does not match the record"
    return fmt.OK, ""


#: Writes at least this large are hashed from the caller's buffer, without a copy.
SHARED_CHUNK_BYTES = 1 << 20


class HashingWriter:
    """A write-only file wrapper that counts what passes through and sha256-hashes it.

    The hash is computed on a thread of its own while the data is written
    (hashlib releases the GIL on large buffers), so a save costs about the
    write and fsync, not write + hash. The buffers written must stay
    unchanged until :meth:`hexdigest` returns (``torch.save`` writes a state
    that does not change while it saves).
    """

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self._sha = hashlib.sha256()
        self._chunks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._hash, name="distrain-sha256", daemon=True)
        self._thread.start()
        self.bytes = 0

    def _hash(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            self._sha.update(chunk)

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.bytes += n
        # Large buffers are tensor storages, unchanged while the state is saved: hashed
        # while they are written. Small ones may be a writer's reused buffer: copied.
        self._chunks.put(data if n >= SHARED_CHUNK_BYTES else bytes(data))
        self._fh.write(data)
        return n

    def hexdigest(self) -> str:
        """The sha256 of everything written (waits for the hashing thread)."""
        self.close()
        return self._sha.hexdigest()

    def close(self) -> None:
        """End the hashing thread (idempotent); call it also when the write failed."""
        if self._thread.is_alive():
            self._chunks.put(None)
            self._thread.join()

    def flush(self) -> None:
        self._fh.flush()
