"""The job's own c10d store, as the runtime's threads use it (standard library and torch only).

The store listens on a port any local user can reach and has no access
control, so nothing the runtime takes out of it is trusted unless the job
key vouches for it: :class:`SignedStore` signs every value it sets with the
key (:func:`.jobkey.signed`) over the value's full key name and the value, so
a value cannot be forged nor moved to another name (an old cell replayed as
a new one), and it seals (:func:`.jobkey.seal`) what must not be read (a
session cell and its outcome). A value that fails verification is refused:
one line on stderr says so, and the reader waits for a good value or skips.

Counters (``store.add``) cannot carry a signature. The runtime only uses them
where a forged count can skip or delay something, within bounds each user
states, and never run anything or change a job's state.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Final

from . import jobkey
from .agent import ENV_ROUND

#: Seconds between two reads of a value that failed verification (waiting for a good one).
POLL_SECONDS: Final = 0.05

_refused: set[str] = set()
_refused_lock = threading.Lock()


_framework_store: Any = None


def use_store(store: Any) -> None:
    """Make ``store`` (with a c10d store's ``set/get/check/add/delete_key``) the job's store
    in a worker whose framework has no torch process group (JAX's coordination service)."""
    global _framework_store
    _framework_store = store


def framework_store() -> Any:
    """The store a framework set up (:func:`use_store`), or None (PyTorch: its process group's)."""
    return _framework_store


def default_store() -> Any:
    """The default process group's store, or None before (or without) a process group.

    A store a framework set up (:func:`use_store`) comes first.
    """
    if _framework_store is not None:
        return _framework_store
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_initialized():
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:
        return None


def worker_round() -> str:
    """This round of workers, the same on every rank of it: the rendezvous round its agent
    gave it (:func:`.agent.worker_rounds`), else torchrun's restart count, else "0"."""
    return os.environ.get(ENV_ROUND) or os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0"


def round_key(area: str, what: str) -> str:
    """A store key of ``area`` for this round of workers (restarts do not meet old keys)."""
    return f"distrain/{area}/{worker_round()}/{what}"


def job_key() -> bytes | None:
    """The job key (:func:`.jobkey.load`), or None when this worker has none or cannot read it."""
    try:
        return jobkey.load()
    except (OSError, ValueError) as exc:
        refuse("the job key", f"cannot read it ({exc})")
        return None


def signed_default_store() -> SignedStore | None:
    """The default process group's store, signed with the job key; None without either."""
    store = default_store()
    key = job_key() if store is not None else None
    if store is None or key is None:
        return None
    return SignedStore(store, key)


def refuse(name: str, why: str) -> None:
    """Say once per name, on stderr, that a store value was refused (nothing used it)."""
    with _refused_lock:
        if name in _refused:
            return
        _refused.add(name)
    print(
        f"distrain: refused {name} from the job's store: {why}; it was not used (a process "
        "without the job key wrote it)",
        file=sys.stderr,
        flush=True,
    )


class SignedStore:
    """A c10d store whose values are signed (or sealed) with the job key.

    ``scope`` is the prefix the underlying store adds to every name (a
    ``PrefixStore``'s), so signatures cover the full name. Readers raise
    :class:`.jobkey.BadSignature` for a value the key did not sign under that
    name; :meth:`wait` and :meth:`wait_sealed` instead refuse it and wait for
    a good one (a writer with the key overwrites it).
    """

    def __init__(self, store: Any, key: bytes, scope: str = "") -> None:
        self.store = store
        self.key = key
        self.scope = scope

    def _bound(self, name: str, data: bytes) -> bytes:
        return (self.scope + name).encode() + b"\0" + data

    def _unbound(self, name: str, data: bytes) -> bytes:
        head = (self.scope + name).encode() + b"\0"
        if not data.startswith(head):
            raise jobkey.BadSignature(f"signed for another key than {name}")
        return data[len(head) :]

    # --- signed values ---------------------------------------------------------------
    def set(self, name: str, value: bytes | str) -> None:
        """Set ``name`` to ``value`` with the key's signature."""
        data = value.encode() if isinstance(value, str) else value
        self.store.set(name, jobkey.signed(self.key, self._bound(name, data), purpose="store"))

    def get(self, name: str) -> bytes:
        """The value of ``name`` (blocks until it exists); BadSignature unless the key signed it."""
        return self._unbound(
            name, jobkey.unsigned(self.key, bytes(self.store.get(name)), purpose="store")
        )

    def get_if(self, name: str) -> bytes | None:
        """The verified value of ``name``; None when it is absent or refused (said once)."""
        if not self.store.check([name]):
            return None
        try:
            return self.get(name)
        except jobkey.BadSignature as exc:
            refuse(name, str(exc))
            return None

    def get_many(self, names: list[str], *, sealed: bool = False) -> list[bytes | None]:
        """The verified (``sealed``: unsealed) values of ``names``, which must all exist, with
        one request to the store (``multi_get``); None for each one that fails verification
        (not said: the caller reads it again on its own, e.g. with :meth:`get_if`)."""
        out: list[bytes | None] = []
        for name, raw in zip(names, self.store.multi_get(names), strict=True):
            try:
                if sealed:
                    data = jobkey.unseal(self.key, bytes(raw))
                else:
                    data = jobkey.unsigned(self.key, bytes(raw), purpose="store")
                out.append(self._unbound(name, data))
            except jobkey.BadSignature:
                out.append(None)
        return out

    def wait(self, name: str) -> bytes:
        """The verified value of ``name``, waiting for it (and past refused values)."""
        return self._wait(name, self.get)

    # --- sealed values ---------------------------------------------------------------
    def set_sealed(self, name: str, value: bytes) -> None:
        """Set ``name`` to ``value`` encrypted and authenticated with the key."""
        self.store.set(name, jobkey.seal(self.key, self._bound(name, value)))

    def get_sealed(self, name: str) -> bytes:
        """The value :meth:`set_sealed` set (blocks until it exists); BadSignature otherwise."""
        return self._unbound(name, jobkey.unseal(self.key, bytes(self.store.get(name))))

    def wait_sealed(self, name: str) -> bytes:
        """The unsealed value of ``name``, waiting for it (and past refused values)."""
        return self._wait(name, self.get_sealed)

    def _wait(self, name: str, read: Any) -> bytes:
        while True:
            try:
                value: bytes = read(name)
                return value
            except jobkey.BadSignature as exc:
                refuse(self.scope + name, str(exc))
                time.sleep(POLL_SECONDS)

    # --- unsigned operations ---------------------------------------------------------
    def add(self, name: str, amount: int) -> int:
        """The counter ``name`` after adding ``amount`` (unsigned: see the module docstring)."""
        return int(self.store.add(name, amount))

    def check(self, names: list[str]) -> bool:
        """Whether every name exists (says nothing about who wrote it)."""
        return bool(self.store.check(names))

    def delete_key(self, name: str) -> bool:
        """Delete ``name``."""
        return bool(self.store.delete_key(name))
