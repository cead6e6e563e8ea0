"""Stand-in ranks for scale tests: many nodes' ranks in one process (standard library and torch).

``python -m jupyter_disttrain.runtime.standin --nodes N --nproc P [behaviours]`` plays a
job of ``N x P`` ranks without running ``N x P`` processes. What the notebook reads
is the real thing: every rank's lines are protocol lines signed with the job key
(``DISTRAIN_KEY_FILE``), the ranks of nodes other than 0 send them through the
real relay (:class:`.relay._Relay`) over a real c10d ``TCPStore`` (one client
connection per node, as each node's agent has), and rank 0 runs the real relay
reader and hang watch (:mod:`.hangwatch`) on a fake process group (torch's
``fake`` backend) whose store is that ``TCPStore``. Only the training is made up:
a rank's step is a clock, its stacks are scripted, its resource samples (sent as
often as a real rank's sampler sends them, :func:`.resources.interval`) fixed.

One node's ranks share one relay sender (the node's ``closed`` count still
counts every rank, so rank 0's drain ends as with one sender per rank). The clock
thread flushes each sender on its tick, nodes spread over the tick: in a real job
each node's sender is a thread of its own process, and a thousand sender threads
in this one process compete with rank 0's reader for the interpreter lock.
Every store request of rank 0 and of the senders is counted, and the rates are
written to node 0's log every few seconds (:mod:`.standin_store`).

Output is framed for the host that shows each node as a pod
(``tests/k8s_emulator/standin.py``): ``@NODE TEXT`` is a line of node
``NODE``'s log, ``!NODE CODE`` says node ``NODE``'s container ended with exit
code ``CODE``. Everything this process prints itself (rank 0's relay, its own
lines) is node 0's.

With ``DISTRAIN_STANDIN_RENDEZVOUS=1`` no rank starts before a line arrives on
stdin: the host sends it once every node's pod has started, as a real job's
rendezvous waits for every node.

Behaviours (:class:`Script`): steady training; stragglers (ranks whose steps take
``--slow`` times longer); one rank raising at a step (its node exits 1); one node
hanging at a step (its ranks stop, every other rank waits in ``all_reduce`` at
the next step, so the job falls silent and rank 0's hang watch asks for stacks);
one node lost at a step (its ranks stop and its container ends with 137).
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from . import hangwatch, jobkey, relay, resources
from .jobstore import SignedStore, use_store
from .protocol import encode
from .standin_script import Script, stacks_for
from .standin_store import StoreTally

__all__ = ["ENV_RENDEZVOUS", "Frames", "Script", "main"]

#: A line of a node's log / the end of a node's container.
LINE: Final = "@"
EXIT: Final = "!"
#: How rank 0's lines start in its pod's log (the launcher's rank prefix, see :mod:`.rankprefix`).
RANK_ZERO: Final = "[rank 0] "
#: Set to ``1``: wait for the rendezvous line on stdin before any rank starts.
ENV_RENDEZVOUS: Final = "DISTRAIN_STANDIN_RENDEZVOUS"
#: Seconds between two turns of the clock that steps every rank.
TURN: Final = 0.05


class Frames:
    """Framed output: one writer for every node's log lines and exits (thread-safe)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()

    def lines(self, node: int, lines: list[str]) -> None:
        text = "".join(f"{LINE}{node} {line}\n" for line in lines)
        with self.lock:
            self.out.write(text)
            self.out.flush()

    def exit(self, node: int, code: int) -> None:
        with self.lock:
            self.out.write(f"{EXIT}{node} {code}\n")
            self.out.flush()


class NodeZeroOut(io.TextIOBase):
    """This process's ``sys.stdout``: what rank 0 prints (the relay's lines) is node 0's log."""

    def __init__(self, frames: Frames) -> None:
        self.frames = frames
        self.partial = ""

    def write(self, text: str) -> int:
        *done, self.partial = (self.partial + text).split("\n")
        if done:
            self.frames.lines(0, [f"{RANK_ZERO}{line}" for line in done])
        return len(text)

    def flush(self) -> None:
        pass


@dataclass
class Node:
    """One node: its ranks' next steps, its store connection and relay sender."""

    index: int
    ranks: range
    sender: relay._Relay | None = None
    next_step: dict[int, int] = field(default_factory=dict)
    stopped: bool = False
    next_flush: float = 0.0
    next_sample: float = 0.0
    verdict: str = "step"
    ending: bool = False


class Host:
    """Every node of the job, stepped by one clock thread."""

    def __init__(self, script: Script, key: bytes, frames: Frames) -> None:
        self.script = script
        self.signer = jobkey.Signer(key)
        self.key = key
        self.frames = frames
        self.world = script.nodes * script.nproc
        self.nodes = [
            Node(n, range(n * script.nproc, (n + 1) * script.nproc)) for n in range(script.nodes)
        ]
        self.started = time.monotonic()
        self.tick = relay.sender_tick(self.world - script.nproc)
        self.sample_every = resources.interval(self.world)  # as each rank's sampler would
        self.served: set[str] = set()
        self.enders: list[threading.Thread] = []
        self.ends: list[tuple[Node, int, float]] = []

    # --- lines -----------------------------------------------------------------------
    def line(self, rank: int, kind: str, **fields: Any) -> str:
        """A protocol line of ``rank`` as its pod's log has it (``[rank R] `` first)."""
        return f"[rank {rank}] " + encode(kind, rank, sign_with=self.signer, **fields)

    def say(self, node: Node, lines: list[str]) -> None:
        """Lines of ``node``'s ranks: in its own log, and (other nodes) through the relay."""
        self.frames.lines(node.index, lines)
        if node.sender is not None:
            for line in lines:
                node.sender.tap(line.partition("] ")[2])

    def hello(self, node: Node) -> None:
        lines = [
            self.line(
                rank,
                "hello",
                local_rank=rank - node.ranks.start,
                world_size=self.world,
                node_rank=node.index,
                host=f"standin-node-{node.index}",
                pid=os.getpid(),
                launched_pid=os.getpid(),
                backend="fake",
                restart=0,
                versions={},
            )
            for rank in node.ranks
        ]
        node.next_step = {rank: 0 for rank in node.ranks}
        self.say(node, lines)

    # --- the clock -------------------------------------------------------------------
    def turn(self, now: float) -> bool:
        """Step every rank whose clock says so; False once every node is done."""
        elapsed = now - self.started
        busy = False
        for node in self.nodes:
            if node.stopped:
                continue
            busy = True
            lines = self.step_node(node, elapsed)
            if not node.stopped:
                lines += self.samples_due(node, elapsed)
            if lines:
                self.say(node, lines)
            self.start_ends()  # after its last lines are in the relay's queue
        self.flush_due(now)
        return busy

    def start_clock(self, now: float) -> None:
        """Start stepping now; node ``i``'s sender first flushes ``i / nodes`` of a tick in."""
        self.started = now
        for node in self.nodes:
            node.next_flush = now + self.tick * node.index / len(self.nodes)
            node.next_sample = self.sample_every * (1 + node.index / len(self.nodes))

    def flush_due(self, now: float) -> None:
        """Send the batch of each node whose sender's tick has come (as its thread would)."""
        for node in self.nodes:
            sender = node.sender
            if sender is None or sender.stop.is_set() or now < node.next_flush:
                continue
            node.next_flush += self.tick
            try:
                sender.flush()
            except Exception:
                sender.stop.set()  # the store went away: its own log still has its lines

    def step_node(self, node: Node, elapsed: float) -> list[str]:
        script = self.script
        out: list[str] = []
        for rank in node.ranks:
            step = node.next_step[rank]
            due = script.due_step(rank, elapsed)
            while step <= due and step < script.steps:
                verdict = script.verdict(rank, step)
                if verdict != "step":
                    return out + self.end_node(node, rank, step, verdict)
                out.append(self.metric(rank, step))
                step += 1
            node.next_step[rank] = step
        if all(node.next_step[r] >= script.steps for r in node.ranks):
            out += [self.line(r, "done", seconds=round(elapsed, 3)) for r in node.ranks]
            node.stopped = True
            self.end_later(node, 0, 0.0)
        return out

    def samples_due(self, node: Node, elapsed: float) -> list[str]:
        """Each rank's ``resources`` line once its sampling interval has come (none when
        sampling is off): as many a second as a real job's samplers send."""
        if not self.sample_every or elapsed < node.next_sample:
            return []
        node.next_sample += self.sample_every
        return [
            self.line(rank, "resources", cpu_pct=100.0 + rank % 13, rss_bytes=2 << 30)
            for rank in node.ranks
        ]

    def metric(self, rank: int, step: int) -> str:
        return self.line(rank, "metric", step=step, values=self.script.values(rank, step))

    def end_node(self, node: Node, rank: int, step: int, verdict: str) -> list[str]:
        """A scripted end of ``node`` (a rank raising, the node lost, hanging or waiting in a
        collective that will not complete) at ``step``."""
        node.stopped = True
        node.verdict = verdict
        if verdict == "raise":
            error = self.line(rank, "error", **self.script.error_fields(rank, step))
            self.end_later(node, 1, 0.0)
            for other in self.nodes:  # the peers' collectives fail once the node is gone
                if other.verdict == "wait":
                    self.end_later(other, 1, 1.0)
            return [error]
        if verdict == "wait" and any(n.verdict == "raise" for n in self.nodes):
            self.end_later(node, 1, 1.0)
        if verdict == "lost":
            self.frames.exit(node.index, 137)
            if node.sender is not None:
                node.sender.stop.set()  # its connection dies with the node
        return []  # "hang": the ranks stay up, silent, until asked for their stacks

    def end_later(self, node: Node, code: int, delay: float) -> None:
        """End ``node`` with ``code`` ``delay`` seconds after :meth:`start_ends` (once)."""
        if node.ending:
            return
        node.ending = True
        self.ends.append((node, code, delay))

    def start_ends(self) -> None:
        """Start the ends :meth:`end_later` queued (threads; :meth:`join` waits for them)."""
        ends, self.ends = self.ends, []
        for node, code, delay in ends:
            thread = threading.Thread(target=self.end, args=(node, code, delay), daemon=True)
            self.enders.append(thread)
            thread.start()

    def end(self, node: Node, code: int, delay: float) -> None:
        time.sleep(delay)
        self.finish(node, code)

    def join(self) -> None:
        for thread in list(self.enders):
            thread.join()

    def finish(self, node: Node, code: int) -> None:
        """Send the node's last lines through the relay, then end its container."""
        sender = node.sender
        if sender is not None:
            sender.stop.set()
            try:
                sender.flush()
                sender.store.add(relay._key("closed"), len(node.ranks))
            except Exception:
                pass  # the store went away: what was sent is sent
        if node.index != 0:
            self.frames.exit(node.index, code)

    # --- stacks ----------------------------------------------------------------------
    def serve_stacks(self, store: SignedStore) -> None:
        """Answer a stacks request (asked or hang) for every rank but 0, as each rank's
        watch does: a ``stacks`` line in its own log and its fields in the store."""
        for request, why in hangwatch.requests_in(store):
            if request in self.served:
                continue
            self.served.add(request)
            for node in self.nodes:
                if node.index and (node.sender is None or node.sender.stop.is_set()):
                    continue  # a lost node answers nothing
                lines = []
                for rank in node.ranks:
                    if rank == 0:
                        continue  # rank 0's own watch answers for it
                    fields = {"request": request, **why, **stacks_for(self.script, rank)}
                    lines.append(self.line(rank, "stacks", **fields))
                    hangwatch.leave_stacks(
                        node.sender.store if node.sender else store, request, rank, fields
                    )
                self.frames.lines(node.index, lines)  # not relayed: rank 0 gathers them


def run(script: Script) -> int:
    """Play ``script``; the exit code of node 0."""
    import torch.distributed as dist
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")

    key = jobkey.load()
    if key is None:
        raise SystemExit("standin: DISTRAIN_KEY_FILE must name the job key")
    frames = Frames(sys.stdout)
    sys.stdout = NodeZeroOut(frames)
    world = script.nodes * script.nproc
    store_class: Any = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's stubs' exports)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]
    # Not libuv: its server, hosted beside hundreds of clients in one process, stalls them
    # (each node's agent is a process of its own in a real job).
    server = store_class(
        "127.0.0.1",
        port,
        is_master=True,
        wait_for_workers=False,
        use_libuv=False,
        master_listen_fd=listener.detach(),
    )
    os.environ.update(RANK="0", WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(script.nproc))
    os.environ[relay.ENV_RELAY] = "1"
    dist.init_process_group("fake", store=server, rank=0, world_size=world)
    tally = StoreTally()  # every request rank 0 and the senders make, counted
    use_store(tally.rank0_store(server))  # the runtime's keys unprefixed, as the nodes' see them
    host = Host(script, key, frames)
    for node in host.nodes[1:]:
        client = store_class("127.0.0.1", server.port, is_master=False, use_libuv=False)
        senders = world - script.nproc
        store = SignedStore(tally.sender_store(client), key)
        node.sender = relay._Relay(store, node.ranks.start, senders)
    if os.environ.get(ENV_RENDEZVOUS) == "1":
        sys.stdin.readline()  # every node is up (or the host is gone: start anyway)
    for node in host.nodes:
        host.hello(node)
    hangwatch.start(0, world, own=lambda: stacks_for(script, 0))
    relay.start(0, world, script.nproc, 0)
    store = SignedStore(server, key)
    counting = threading.Event()
    tally.every(lambda text: frames.lines(0, [text]), counting)
    host.start_clock(time.monotonic())  # once every node is connected
    while host.turn(time.monotonic()):
        host.serve_stacks(store)
        time.sleep(TURN)
    while script.hang_node is not None:  # hung: stay up, answering stack requests
        host.flush_due(time.monotonic())
        host.serve_stacks(store)
        time.sleep(TURN)
    host.join()
    relay.stop(wait=True)
    hangwatch.stop()
    counting.set()
    return 0 if host.nodes[0].verdict == "step" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_disttrain.runtime.standin")
    Script.add_arguments(parser)
    return run(Script.from_args(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
