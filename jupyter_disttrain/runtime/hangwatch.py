"""A rank's watch thread: its stacks on request, and the job's own hang detection.

Standard library and torch only. One daemon thread per rank, started once
the rank said hello, stopped before the process group is torn down.

- **Requests.** A request is served once: every rank writes a ``stacks``
  protocol line (all its threads; see :mod:`.stacks`). The notebook asks by
  raising a counter rank 0 reads: a file in the job directory (``where`` in
  ``DISTRAIN_JOB_DIR``, local jobs) or an annotation of rank 0's pod, which
  the kubelet writes into a downward-API file (``DISTRAIN_POD_ANNOTATIONS``).
  Rank 0 passes the request on through the job's store; without a store
  (TensorFlow) each rank reads the job-directory file itself. Rank 0 raises
  hang requests the same way.
- **Controls.** The same way (a file of the job directory named after the
  control, or an annotation of rank 0's pod) the notebook leaves signed
  requests (:mod:`.control`): pause ranks, set the running cell's
  breakpoints. Rank 0 passes each new one on through the store; each rank
  acts on it (:mod:`.pausing`). A restarted round of workers does not take
  the requests made before it started. Rank 0 counts every request it puts
  in the store on one counter: a tick of the other ranks reads that counter
  alone, and the requests only when it moved (one store round trip a tick
  instead of four: at 8,192 ranks, rank 0's store answers a few thousand a
  second rather than tens of thousands).
- **Hang detection** (``DISTRAIN_HANG_AFTER`` seconds, 0 turns it off):
  every rank adds to a store counter each tick in which it wrote anything
  (its log grew, a protocol line, a line through the rank prefixer; resource
  samples, the quiet kind of line, do not count). When
  the counter stood still for that long, rank 0 raises a hang request.
  Every rank also leaves its stacks in the store; rank 0 writes the lines
  of the ranks that did so for them, so a notebook that follows only rank
  0's log (Kubernetes) still gets every rank's stacks. Lines seen twice
  are the same line (the notebook keeps one per request and rank).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from . import control, debugger, env, pausing, rankprefix, report, stacks
from .cell import code_filename
from .jobstore import SignedStore, job_key, round_key, signed_default_store, worker_round

ENV_HANG = "DISTRAIN_HANG_AFTER"
#: A pod's annotations file (downward API): the notebook asks for stacks by annotating rank 0.
ENV_ANNOTATIONS = "DISTRAIN_POD_ANNOTATIONS"
WHERE_ANNOTATION: Final = "disttrain.jupyter.org/where"
DEFAULT_HANG_AFTER: Final = 300.0
REQUEST_FILE: Final = "where"
#: Seconds rank 0 waits for the other ranks' stacks in the store (plus 1 s per 1,000 ranks).
GATHER_SECONDS: Final = 5.0
#: Ranks' stacks rank 0 reads with one request to the store.
GATHER_CHUNK: Final = 256
#: A part of a chunk of at most this many ranks that did not answer whole is read rank by
#: rank.
GATHER_FLOOR: Final = 8

_watch: _Watch | None = None


def hang_after() -> float:
    """Seconds of silence from every rank that make a hang (0: never)."""
    return env.seconds(ENV_HANG, DEFAULT_HANG_AFTER)


def request_file(job_dir: str) -> str:
    """The file whose counter asks a local job's ranks for their stacks."""
    return os.path.join(job_dir, REQUEST_FILE)


def annotation_value(path: str, key: str) -> str:
    """The value of annotation ``key`` in a downward-API annotations file ("": none).

    The file has one ``key="value"`` line per annotation, values quoted as Go strings.
    """
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, sep, value = line.strip().partition("=")
                if sep and name == key:
                    text = json.loads(value)
                    return text if isinstance(text, str) else ""
    except (OSError, ValueError):
        pass
    return ""


def annotation_counter(path: str, key: str) -> int:
    """The integer value of annotation ``key`` in a downward-API annotations file (0: none)."""
    value = annotation_value(path, key)
    return int(value) if value.isdigit() else 0


def _key(what: str) -> str:
    return round_key("where", what)


def requests_in(store: SignedStore) -> list[tuple[str, dict[str, Any]]]:
    """The stacks requests rank 0 passed on through ``store``: ``(request, why)`` each."""
    value = store.get_if(_key("asked"))
    out = asked_request(int(value) if value is not None else 0)
    hang = store.get_if(_key("hang"))
    if hang is not None:
        fields = json.loads(hang)
        out.append((f"h{fields['n']}", {"reason": "hang", "quiet": fields["quiet"]}))
    return out


def asked_request(asked: int) -> list[tuple[str, dict[str, Any]]]:
    """The stacks request of the user's ``asked``-th ask (none before the first): ``a{N}``."""
    return [(f"a{asked}", {"reason": "asked"})] if asked else []


def leave_stacks(store: SignedStore, request: str, rank: int, fields: dict[str, Any]) -> None:
    """Leave ``rank``'s answer to ``request`` in ``store`` for rank 0 to write out."""
    store.set(_key(f"{request}/{rank}"), json.dumps(fields))


def gather(store: SignedStore, request: str, pending: set[int]) -> list[tuple[int, bytes]]:
    """The answers to ``request`` of the ``pending`` ranks that left one, taken out of
    ``pending``: :data:`GATHER_CHUNK` ranks a round trip when all of them answered. A chunk
    with ranks that did not is halved until each part answered whole or holds at most
    :data:`GATHER_FLOOR` ranks, read one by one, so the silent ranks of a hung node cost a
    few requests each, not one or two per rank of their chunk."""
    found: list[tuple[int, bytes]] = []
    ranks = sorted(pending)
    for start in range(0, len(ranks), GATHER_CHUNK):
        found += _answers(store, request, ranks[start : start + GATHER_CHUNK])
    pending.difference_update(rank for rank, _ in found)
    return found


def _answers(store: SignedStore, request: str, ranks: list[int]) -> list[tuple[int, bytes]]:
    names = [_key(f"{request}/{rank}") for rank in ranks]
    if store.check(names):
        values: list[bytes | None] = store.get_many(names)
    elif len(ranks) > GATHER_FLOOR:
        half = len(ranks) // 2
        return _answers(store, request, ranks[:half]) + _answers(store, request, ranks[half:])
    else:  # a few ranks, some silent: one by one (one request for each silent one)
        values = [None] * len(ranks)
    found: list[tuple[int, bytes]] = []
    for rank, name, value in zip(ranks, names, values, strict=True):
        value = value if value is not None else store.get_if(name)  # refused: said once
        if value is not None:
            found.append((rank, value))
    return found


class _Watch:
    def __init__(
        self,
        rank: int,
        world: int,
        job_dir: str | None,
        hang: float,
        own: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.rank = rank
        self.own = own
        self.world = world
        self.file = request_file(job_dir) if job_dir else None
        self.job_dir = job_dir
        self.key = job_key()  # the notebook's requests are signed with it
        self.annotations = os.environ.get(ENV_ANNOTATIONS) or None
        self.forwarded = 0
        self.hang = hang
        self.tick = min(1.0, hang / 5) if hang else 1.0
        self.store = signed_default_store()
        self.stop = threading.Event()
        self.served: set[str] = set()
        self.token = self._activity()
        # a restarted round does not take again the requests its predecessor took
        restarted = worker_round() != "0"
        self.taken = {c: self._newest(c)[0] if restarted else 0 for c in control.CONTROLS}
        self.passed_on = dict(self.taken)  # rank 0: the newest request put in the store
        self.read_changes = -1  # the store's change counter when this rank last read it
        self.thread = threading.Thread(target=self._run, name="distrain-where", daemon=True)

    # --- what counts as activity -------------------------------------------------
    def _activity(self) -> tuple[int, ...]:
        sizes = []
        with report.lock:  # quiet lines (resource samples) are no activity: not their bytes
            quiet, stdout = report.quiet_bytes, None
            for fd in (1, 2):
                try:
                    st = os.fstat(fd)
                except OSError:
                    continue
                if st.st_mode & 0o170000 != 0o100000:
                    sizes.append(0)
                    continue
                if fd == 1:
                    stdout = (st.st_dev, st.st_ino)  # the file the quiet lines went to
                same = (st.st_dev, st.st_ino) == stdout
                sizes.append(st.st_size - (quiet if same else 0))
        return (*sizes, rankprefix.chunks, report.emitted)

    def _run(self) -> None:
        count_seen = -1
        quiet_since = time.monotonic()
        hangs = 0
        while not self.stop.wait(self.tick):
            try:
                token = self._activity()
                if token != self.token or debugger.paused():  # a paused rank is no hang
                    self.token = token
                    if self.store is not None and self.hang:
                        self.store.add(_key("active"), 1)
                if self.rank == 0 and self.store is not None and self.hang:
                    count = self.store.add(_key("active"), 0)
                    now = time.monotonic()
                    if count != count_seen:
                        count_seen, quiet_since = count, now
                    elif now - quiet_since >= self.hang:  # once per silence
                        hangs += 1
                        quiet = round(now - quiet_since, 1)
                        self.store.set(_key("hang"), json.dumps({"n": hangs, "quiet": quiet}))
                        self.store.add(_key("changed"), 1)
                        quiet_since = float("inf")
                if self.store is None:
                    self._controls_from_files()
                    requests = self._requests_from_files()
                else:
                    if self.rank == 0:
                        self._pass_on(self.store)
                    requests = self._read_store(self.store)
                for request, why in requests:
                    if request not in self.served:
                        self.served.add(request)
                        self._serve(request, why)
                        self.token = self._activity()  # the dump itself is no activity
            except Exception:
                if self.stop.is_set():
                    return
                self.store = None  # the store went away (a peer's agent ended): files only

    def _asked(self) -> int:
        """The highest request counter in this rank's control files (0: none)."""
        asked = 0
        if self.file is not None:
            try:
                with open(self.file, encoding="utf-8") as f:
                    asked = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
        if self.annotations is not None:
            asked = max(asked, annotation_counter(self.annotations, WHERE_ANNOTATION))
        return asked

    def _newest(self, name: str) -> tuple[int, str, str]:
        """The newest valid request of control ``name`` in this rank's control files:
        its number, body and text (0 when there is none)."""
        found: tuple[int, str, str] = (0, "", "")
        if self.key is None:
            return found
        texts = []
        if self.annotations is not None:
            texts.append(annotation_value(self.annotations, control.annotation(name)))
        if self.job_dir is not None:
            try:
                with open(os.path.join(self.job_dir, name), encoding="utf-8") as f:
                    texts.append(f.read(control.MAX_BODY + 256))
            except OSError:
                pass
        for text in texts:
            parsed = control.parse(text, self.key) if text else None
            if parsed is not None and parsed[0] > found[0]:
                found = (*parsed, text.strip())
        return found

    def _pass_on(self, store: SignedStore) -> None:
        """Rank 0: put each control's newest request and a new stacks request from this
        rank's files into ``store``, and count the change (the other ranks read then)."""
        changed = False
        for name in control.CONTROLS:
            number, _, text = self._newest(name)
            if number > self.passed_on[name]:
                store.set(_key(f"control/{name}"), text)
                self.passed_on[name] = number
                changed = True
        asked = self._asked()
        if asked > self.forwarded:
            store.set(_key("asked"), str(asked))
            self.forwarded = asked
            changed = True
        if changed:
            store.add(_key("changed"), 1)

    def _read_store(self, store: SignedStore) -> list[tuple[str, dict[str, Any]]]:
        """Act on each control's newest request in ``store`` once, and return the stacks
        requests there; nothing is read but the change counter when it did not move."""
        changes = store.add(_key("changed"), 0)
        if changes == self.read_changes:
            return []
        self.read_changes = changes
        for name in control.CONTROLS:
            value = store.get_if(_key(f"control/{name}"))
            if value and self.key is not None:
                parsed = control.parse(value.decode(errors="replace"), self.key)
                if parsed is not None:
                    self._take(name, *parsed)
        return [r for r in requests_in(store) if self.hang or r[1]["reason"] != "hang"]

    def _controls_from_files(self) -> None:
        """Without a store: act on each control's newest request in this rank's files."""
        for name in control.CONTROLS:
            number, body, _ = self._newest(name)
            self._take(name, number, body)

    def _requests_from_files(self) -> list[tuple[str, dict[str, Any]]]:
        """Without a store: the stacks request in this rank's files (none: [])."""
        return asked_request(self._asked())

    def _take(self, name: str, number: int, body: str) -> None:
        """Act on request ``number`` of control ``name`` if it is newer than the last taken."""
        if number > self.taken[name]:
            self.taken[name] = number
            self._act(name, body)

    def _act(self, name: str, body: str) -> None:
        if name == control.PAUSE:
            valid, ranks = control.parse_ranks(body)
            if valid and (ranks is None or self.rank in ranks):
                pausing.request_pause()
        elif name == control.BREAKS:
            spots = control.parse_breaks(body)
            if spots is not None:
                pausing.request_breaks(spots)

    def _serve(self, request: str, why: dict[str, Any]) -> None:
        me = threading.get_ident()
        where = (
            self.own()
            if self.own is not None
            else {
                "threads": stacks.all_stacks(code_filename(), skip={me}),
                "collective": stacks.last_collective(),
                "pid": os.getpid(),
            }
        )
        fields = {"request": request, **why, **where}
        report.emit_as(self.rank, "stacks", **fields)
        if self.store is None:
            return
        leave_stacks(self.store, request, self.rank, fields)
        if self.rank != 0:
            return
        deadline = time.monotonic() + gather_seconds(self.world)
        pending = set(range(1, self.world))
        while pending and time.monotonic() < deadline and not self.stop.is_set():
            for rank, value in gather(self.store, request, pending):
                report.emit_as(rank, "stacks", **json.loads(value))
            time.sleep(0.1)


def gather_seconds(world: int) -> float:
    """Seconds rank 0 waits for the others' stacks: :data:`GATHER_SECONDS`, and one more per
    1,000 ranks (as torch's store barrier scales)."""
    return GATHER_SECONDS + world / 1000


def start(rank: int, world: int, own: Callable[[], dict[str, Any]] | None = None) -> None:
    """Start this rank's watch (idempotent; call after the process group is up).

    ``own``: where this rank is, instead of its threads' stacks (the stand-in ranks of
    :mod:`.standin`, whose process is not the training's)."""
    global _watch
    if _watch is not None:
        return
    _watch = _Watch(rank, world, os.environ.get("DISTRAIN_JOB_DIR"), hang_after(), own)
    _watch.thread.start()


def stop() -> None:
    """Stop the watch before the process group is torn down."""
    global _watch
    if _watch is None:
        return
    _watch.stop.set()
    _watch.thread.join(timeout=2.0)
    _watch = None
