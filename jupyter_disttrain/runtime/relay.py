"""Every rank's protocol lines through rank 0's log, over the job's own store.

Standard library and torch only. With ``DISTRAIN_RELAY=1`` (set in every
pod: the notebook follows one log, node 0's), each rank on another node
queues its protocol lines (metrics, checkpoints, hello, errors) and a
thread sends them in batches through the job's c10d store; rank 0 takes
them out and writes them to its own stdout, where the notebook reads them.
Connections stay O(1) whatever the number of nodes: the store connections
exist anyway, and the notebook follows one pod log.

Batches are numbered by one store counter (``seq``); a batch is written
after its number is taken, so the reader waits for a number whose batch is
not there yet and skips it once :data:`MISSING_SECONDS` have passed since it
first saw that number taken (its writer died). Each number has its own grace
(with a thousand senders many numbers are taken and not yet written at any
moment, more so on a loaded machine). Rank 0 reads up to :data:`CHUNK`
batches with one request, and with more than :data:`SENDERS_PER_TICK`
senders each sender's tick grows (up to :data:`MAX_TICK`) so that rank 0's
reads per second stay bounded. At the end each sender flushes and says so (``closed``);
rank 0 drains until every sender did, or :data:`DRAIN_SECONDS` passed.
A line may reach the notebook twice (also from a failed pod's own log):
the notebook keeps one copy of each protocol line.

Batches are sealed with the job key (:class:`.jobstore.SignedStore`): another
user who reaches the store can neither read them nor put lines in rank 0's
log; a batch that fails verification counts as missing. Without a job key
nothing is relayed (every rank's lines stay in its own log). The counters
are not signed; a forged one only skips or delays batches, within bounds:
``seq`` raised makes rank 0 wait :data:`MISSING_SECONDS` once for
the numbers no batch has (they were all seen taken at once), and a jump
of more than :data:`MAX_GAP` skips the unread batches before it; ``seq``
lowered skips batches up to the amount taken off; ``closed`` raised ends
the last drain early, lowered makes it last :func:`drain_seconds`.
Skipped lines are still in their rank's own log.

With rank 0's metrics endpoint on (``DISTRAIN_METRICS_PORT``), the other
ranks of node 0 send too, in batches marked for observing only: rank 0's
endpoint sees them, its log does not repeat what their own lines said.

The relay carries at most :data:`JOB_METRICS_PER_SECOND` metric lines a second
for the whole job: each sending rank's share of it over each batch's time
(:func:`metric_budget`). A rank that reports faster has its metric lines thinned
to the steps that are multiples of a power-of-two stride, and its latest
(:func:`thinned`): ranks reporting alike keep the same steps, so the notebook's
per-step band across ranks stays exact at those steps, and every rank's pace
and last step stay current. The lines left out are in the rank's own log; no
other kind is ever thinned.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Final

from . import report
from .jobkey import BadSignature
from .jobstore import SignedStore, refuse, round_key, signed_default_store
from .protocol import metric_step

ENV_RELAY = "DISTRAIN_RELAY"
ENV_METRICS_PORT = "DISTRAIN_METRICS_PORT"
#: First line of a batch that rank 0 observes without writing it to its log.
OBSERVE_ONLY: Final = "#observe"
TICK: Final = 0.3
MISSING_SECONDS: Final = 5.0
DRAIN_SECONDS: Final = 10.0
#: Batches rank 0 reads with one request to the store (when all of them are there).
CHUNK: Final = 64
#: Senders whose batches rank 0 reads every :data:`TICK`; more make every sender's tick
#: longer (at most :data:`MAX_TICK`), so rank 0's reads per second stay bounded.
SENDERS_PER_TICK: Final = 128
MAX_TICK: Final = 2.0
#: Batch numbers rank 0 looks at in one drain at most (more: the counter was forged).
MAX_GAP: Final = 10_000

#: Metric lines a second the relay carries for the whole job at most (8,192 ranks reporting
#: once a second fit; see :func:`thinned`).
JOB_METRICS_PER_SECOND: Final = 8192
_relay: _Relay | None = None


def sender_tick(senders: int) -> float:
    """Seconds between a sender's batches when there are ``senders`` (see
    :data:`SENDERS_PER_TICK`)."""
    return min(MAX_TICK, TICK * max(1.0, senders / SENDERS_PER_TICK))


def metric_budget(senders: int, seconds: float) -> int:
    """Metric lines one rank of ``senders`` may send in a batch covering ``seconds``."""
    return max(1, math.ceil(JOB_METRICS_PER_SECOND / max(1, senders) * seconds))


def thinned(lines: list[str], budget: int) -> list[str]:
    """``lines`` (a batch, oldest first) with each rank's metric lines cut to ``budget`` or
    so: when a rank has more, those at steps that are multiples of the smallest power-of-two
    stride that fits, and its last one. Any other line is kept, in order."""
    steps: dict[int, list[int]] = {}
    found = [metric_step(line) for line in lines]
    for mark in found:
        if mark is not None:
            steps.setdefault(mark[0], []).append(mark[1])
    strides: dict[int, tuple[int, int]] = {}
    for rank, seen in steps.items():
        if len(seen) > budget:
            stride = 2 ** math.ceil(math.log2(len(seen) / budget))
            strides[rank] = (stride, seen[-1])
    if not strides:
        return lines
    kept: list[str] = []
    for line, mark in zip(lines, found, strict=True):
        if mark is not None and mark[0] in strides:
            stride, last = strides[mark[0]]
            if mark[1] % stride and mark[1] != last:
                continue
        kept.append(line)
    return kept


def drain_seconds(world: int) -> float:
    """Seconds rank 0 waits for the last batches: :data:`DRAIN_SECONDS` and 1 s per 1,000
    ranks (as torch's store barrier scales)."""
    return DRAIN_SECONDS + world / 1000


def _key(what: str) -> str:
    return round_key("relay", what)


class _Relay:
    def __init__(self, store: SignedStore, rank: int, senders: int, echo: bool = True) -> None:
        self.store = store
        self.rank = rank
        self.senders = senders
        self.echo = echo  # a sender's lines go to rank 0's log too (not only its observers)
        self.lock = threading.Lock()
        self.io = threading.Lock()  # one sender or reader on the store at a time (see sync)
        self.queue: list[str] = []
        self.flushed = time.monotonic()  # the last batch's time (a sender's metric budget)
        self.stop = threading.Event()
        self.next = 1  # the reader's next batch number
        self.seen = 0  # the highest batch number the reader has seen taken
        self.marks: list[tuple[int, float]] = []  # (highest number seen, when), oldest first
        target = self._read if rank == 0 else self._send
        self.thread = threading.Thread(target=target, name="distrain-relay", daemon=True)

    # --- senders (ranks of nodes other than 0) ---------------------------------------
    def tap(self, line: str) -> None:
        with self.lock:
            self.queue.append(line.rstrip("\n"))

    def flush(self) -> None:
        with self.io:
            with self.lock:
                lines, self.queue = self.queue, []
            now = time.monotonic()
            seconds, self.flushed = max(now - self.flushed, sender_tick(self.senders)), now
            if lines and self.echo:
                lines = thinned(lines, metric_budget(self.senders, seconds))
            if lines:
                if not self.echo:
                    lines.insert(0, OBSERVE_ONLY)
                seq = self.store.add(_key("seq"), 1)
                self.store.set_sealed(_key(f"m{seq}"), "\n".join(lines).encode())

    def _send(self) -> None:
        while not self.stop.wait(sender_tick(self.senders)):
            try:
                self.flush()
            except Exception:
                return  # the store went away: this rank's own log still has its lines

    # --- rank 0 ----------------------------------------------------------------------
    def drain(self, deadline: float | None = None) -> None:
        """Write out every batch numbered so far (waiting for late writers)."""
        with self.io:
            self._drain(deadline)

    def _drain(self, deadline: float | None) -> None:
        last = self.store.add(_key("seq"), 0)
        if last - self.next >= MAX_GAP:
            refuse(
                _key("seq"),
                f"the batch counter jumped from {self.next - 1} to {last}; the "
                f"batches before {last - MAX_GAP + 1} are skipped",
            )
            self.next = last - MAX_GAP + 1
        now = time.monotonic()
        if last > self.seen:  # numbers taken since the last look: their age starts now
            self.marks.append((last, now))
            self.seen = last
        while self.next <= last:
            if self._chunk(last):
                continue
            key = _key(f"m{self.next}")
            lines = self._batch(key)
            while lines is None:
                limit = self._taken_at(self.next) + MISSING_SECONDS
                limit = limit if deadline is None else min(limit, deadline)
                if time.monotonic() > limit:
                    break
                time.sleep(0.05)
                lines = self._batch(key)
            if lines is not None:
                self.store.delete_key(key)
                echo = lines[0] != OBSERVE_ONLY
                report.write_lines(lines if echo else lines[1:], echo=echo)
            elif self.store.check([key]):
                refuse(key, "it failed verification with the job key")
            self.next += 1

    def _taken_at(self, number: int) -> float:
        """When this reader first saw batch ``number`` taken (its writer has had since then)."""
        while self.marks and self.marks[0][0] < number:
            self.marks.pop(0)
        return self.marks[0][1] if self.marks else time.monotonic()

    def _chunk(self, last: int) -> bool:
        """Write out the next :data:`CHUNK` batches (up to ``last``) with one read when all
        of them are there; False (nothing done) when one is missing."""
        upto = min(last, self.next + CHUNK - 1)
        if upto == self.next:
            return False
        first = self.next
        keys = [_key(f"m{n}") for n in range(first, upto + 1)]
        if not self.store.check(keys):
            return False
        for key, data in zip(keys, self.store.get_many(keys, sealed=True), strict=True):
            if data is None:  # forged (the real one may still come): read it on its own
                return self.next != first
            self.store.delete_key(key)
            self.next += 1
            lines = data.decode("utf-8", "replace").split("\n")
            echo = lines[0] != OBSERVE_ONLY
            report.write_lines(lines if echo else lines[1:], echo=echo)
        return True

    def _batch(self, key: str) -> list[str] | None:
        """The lines of batch ``key``; None while it is missing or fails verification."""
        if not self.store.check([key]):
            return None
        try:
            return self.store.get_sealed(key).decode("utf-8", "replace").split("\n")
        except BadSignature:
            return None  # a forged batch: the real one may still overwrite it

    def _read(self) -> None:
        while not self.stop.wait(TICK):
            try:
                self.drain()
            except Exception:
                return

    def close(self, wait: bool) -> None:
        self.stop.set()
        self.thread.join(timeout=2.0)
        try:
            if self.rank != 0:
                self.flush()
                self.store.add(_key("closed"), 1)
                return
            deadline = time.monotonic() + (drain_seconds(self.senders) if wait else 0.0)
            while time.monotonic() < deadline:
                closed = self.store.add(_key("closed"), 0)
                self.drain(deadline)
                if closed >= self.senders:
                    self.drain(deadline)
                    return
                time.sleep(TICK)
        except Exception:
            pass  # a peer's agent (the store's host) ended first: what was sent is sent


def start(rank: int, world: int, local_world: int, node: int) -> None:
    """Relay this rank's protocol lines (other nodes) or collect them (rank 0), if asked."""
    global _relay
    relay = os.environ.get(ENV_RELAY) == "1" and world > local_world
    observe = bool(os.environ.get(ENV_METRICS_PORT)) and world > 1
    if _relay is not None or not (relay or observe):
        return
    if rank != 0 and node == 0 and not observe:
        return  # node 0's log is the one the notebook follows
    store = signed_default_store()
    if store is None:  # no process group, or no job key: every rank's lines stay in its own log
        return
    senders = (world - 1) if observe else (world - local_world)
    _relay = _Relay(store, rank, senders, echo=relay and node != 0)
    if rank != 0:
        report.set_tap(_relay.tap)
    _relay.thread.start()


def sync() -> None:
    """Now rather than at the next tick: send this rank's queued lines (other nodes), or
    write out every batch sent so far (rank 0). A session's ranks sync after a cell's
    ``cell`` end line and before saying they are done; rank 0 syncs before it replies,
    so every rank's lines of the cell are in its log before the reply reaches the notebook."""
    relay = _relay
    if relay is None or (relay.rank == 0 and relay.stop.is_set()):
        return
    try:
        relay.flush() if relay.rank != 0 else relay.drain()
    except Exception:
        return  # the store went away: the job is ending; the tick or close sends the rest


def stop(wait: bool = True) -> None:
    """Send (or collect) the last lines; call before the process group is torn down.

    Rank 0 waits up to :data:`DRAIN_SECONDS` for every sender's last batch
    unless ``wait`` is false (it failed: the others may never get there).
    """
    global _relay
    if _relay is None:
        return
    relay, _relay = _relay, None
    report.set_tap(None)
    relay.close(wait)
