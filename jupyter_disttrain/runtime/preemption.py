"""Preemption: SIGTERM (node drain, spot reclaim) becomes one last checkpoint, then an exit.

Installed only for cells that save checkpoints. On SIGTERM a rank notes the
request locally and in the job's store, and keeps training. Rank 0 (the
writer of full checkpoints) sees it there; its next ``every(...)`` is due,
the checkpoint saved then is the last, and it marks it in the store and
exits with 143 (128 + SIGTERM); every other rank that was told to stop
exits as soon as that mark is there. torchrun or the operator restarts the
workers and ``load_checkpoint()`` resumes from that checkpoint: no step is
lost. A rank that reaches no checkpoint within
``DISTRAIN_GRACE_PERIOD`` seconds (``--grace-period``; 30 by default) exits
anyway, before the sender's own deadline. Standard library and torch only.

Both store notes (``asked``, ``saved``) are signed with the job key
(:class:`.jobstore.SignedStore`) and checked before a rank acts on them: a
note another user wrote into the store is refused and stops nothing.
Without a job key each rank acts on its own SIGTERM only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from . import env
from .jobstore import SignedStore, round_key, signed_default_store

ENV_GRACE = "DISTRAIN_GRACE_PERIOD"
DEFAULT_GRACE = 30.0
#: Seconds kept back from the grace period to exit before the sender kills.
MARGIN = 2.0
#: How often ``pending()`` asks the job's store whether another rank was told to stop.
STORE_POLL_SECONDS = 0.5
EXIT_CODE = 128 + signal.SIGTERM

_requested: float | None = None
_store_checked = 0.0
_store_seen = False
_signed: SignedStore | None = None
_lock = threading.Lock()
_installed = False


def uses_checkpoints(source: str) -> bool:
    """Whether a cell saves checkpoints (then SIGTERM becomes a last checkpoint)."""
    return "save_checkpoint" in source or "every(" in source


def grace_period() -> float:
    """Seconds between SIGTERM and the exit at the latest."""
    return env.seconds(ENV_GRACE, DEFAULT_GRACE, least=1.0)


def install() -> None:
    """Turn SIGTERM into a preemption request (main thread only; idempotent)."""
    global _installed
    _store()  # the key is read now, not inside the signal handler (its lock)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed = True


def installed() -> bool:
    """Whether SIGTERM is a preemption request in this process (see :func:`install`)."""
    return _installed


def _store() -> SignedStore | None:
    """The job's store signed with the job key (made once the process group is up)."""
    global _signed
    if _signed is None:
        _signed = signed_default_store()
    return _signed


def _store_key(what: str = "asked") -> str:
    return round_key("preempt", what)


def _on_sigterm(signum: int, frame: Any) -> None:
    global _requested
    with _lock:
        if _requested is not None:
            return
        _requested = time.monotonic()
    grace = grace_period()
    print(
        f"distrain: SIGTERM: saving a last checkpoint at the next due step, then exiting "
        f"(within {grace:g} s)",
        flush=True,
    )
    store = _store()
    if store is not None:
        try:
            store.set(_store_key("asked"), "1")
        except Exception:
            pass
    deadline = _requested + max(0.5, grace - MARGIN)
    wait = _wait_for_writer if os.environ.get("RANK", "0") != "0" else _wait_until
    threading.Thread(
        target=wait, args=(deadline, store), daemon=True, name="distrain-preemption"
    ).start()


def _wait_until(deadline: float, store: Any) -> None:
    """The writer: give up when no checkpoint was reached by ``deadline``."""
    time.sleep(max(0.0, deadline - time.monotonic()))
    _give_up()


def _wait_for_writer(deadline: float, store: Any) -> None:
    """Another rank: exit once the writer saved the last checkpoint (or at ``deadline``)."""
    while time.monotonic() < deadline:
        try:
            if store is not None and store.get_if(_store_key("saved")) is not None:
                print("distrain: preempted: the last checkpoint is saved; exiting", flush=True)
                exit_now()
        except Exception:
            pass  # the writer's agent went away: wait for the deadline
        time.sleep(0.2)
    _give_up()


def _give_up() -> None:
    print("distrain: no checkpoint was reached within the grace period; exiting", flush=True)
    exit_now()


def pending() -> bool:
    """Whether this job was asked to stop (on this rank, or on another through the store)."""
    global _store_checked, _store_seen
    if _requested is not None or _store_seen:
        return True
    now = time.monotonic()
    if now - _store_checked < STORE_POLL_SECONDS:
        return False
    _store_checked = now
    store = _store()
    if store is None:
        return False
    try:
        _store_seen = store.get_if(_store_key("asked")) == b"1"
    except Exception:
        return False
    return _store_seen


def agreed() -> None:
    """Every rank agreed the job stops (a library's step-end vote): this rank stops too."""
    global _store_seen
    _store_seen = True


def follow_writer() -> None:
    """A rank that saved its part of the last checkpoint: exit once the writer committed it."""
    deadline = (_requested or time.monotonic()) + max(0.5, grace_period() - MARGIN)
    _wait_for_writer(deadline, _store())


def checkpoint_saved(step: int) -> None:
    """Called after a checkpoint was committed: exit for a restart if a stop was asked."""
    if pending():
        store = _store()
        if store is not None:
            try:
                store.set(_store_key("saved"), str(step))
            except Exception:
                pass
        print(
            f"distrain: preempted: checkpoint of step {step} saved; exiting so the job "
            "restarts from it",
            flush=True,
        )
        exit_now()


def exit_now() -> None:
    """Flush and leave with :data:`EXIT_CODE` at once."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_CODE)
