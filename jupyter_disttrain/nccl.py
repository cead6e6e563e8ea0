"""Read NCCL, PyTorch c10d and gloo communication logs: a summary and a diagnosis.

Pure: no I/O. :class:`NcclParser` is fed every plain log line of every rank
and keeps only what the summary needs, so a line that is not about
communication costs a few substring tests and memory stays bounded.
:meth:`NcclParser.summary` returns an :class:`NcclSummary`: the NCCL version,
the transports per rank, the interfaces, the number of ranks, whether init
completed, the warning count, a failure class and one sentence of diagnosis
with the fix.

Failure classes, most likely root cause first when several are present:
``cuda-oom``, ``shm``, ``ib``, ``connection``, ``other`` (a specific
error outside those), ``timeout``; then ``other`` again for a suspect
configuration (sockets on loopback, a Docker bridge address, an IPv6
link-local address) or an NCCL error with no recognised cause; else
``none``. Errors on other ranks usually follow from the root cause (a rank
that runs out of memory makes its peers see closed connections and
timeouts), hence the order.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from .logbuffer import format_ranks

#: Every value of :attr:`NcclSummary.failure`.
FAILURES: Final = ("none", "connection", "ib", "cuda-oom", "timeout", "shm", "other")
#: ``raw_lines`` and ``comm_lines`` keep the first ``RAW_HEAD`` and the last ``RAW_TAIL`` lines.
RAW_HEAD: Final = 500
RAW_TAIL: Final = 500

_ROOT_CAUSE_ORDER: Final = ("cuda-oom", "shm", "ib", "connection", "other", "timeout")
_MAX_TRACKED: Final = 4096  # ranks, processes, hosts and addresses remembered
_MAX_IFACES: Final = 32
_MAX_TEXT: Final = 240
_EXPLICIT: Final = 1 << 62  # "communicator size" of a rank given to feed()

Source = int | str  # a global rank, or "host:pid" until the rank is known

# Substrings that make a line worth a closer look; checked before any regex.
_MARKERS: Final = (
    "NCCL",
    "nccl",
    "c10d",
    "ProcessGroup",
    "Gloo",
    "gloo",
    "torch.distributed",
    "TCPStore",
    "Rendezvous",
    "Last error",
)

_HEADER = re.compile(r"([^\s:\[\]]+):(\d+):\d+ \[(\d+)\] ")
_VERSION = re.compile(r"NCCL version:? (\d+\.\d+\.\d+(?:\+cuda\d+(?:\.\d+)*)?)")
_COMM = re.compile(r"\brank (\d+) nranks (\d+)", re.IGNORECASE)
_NNODES = re.compile(r"\bnNodes (\d+)")
_PG_SIZE = re.compile(r"\bsize: (\d+), global rank: (\d+)")
_GLOO_PEERS = re.compile(r"\[Gloo\] Rank (\d+) is connected to \d+ peer ranks.*?is : (\d+)")
_RING = re.compile(r"\b(?:Channel|Ring) \d+(?:/\d+)? :((?: +\d+)+) *$")
_VIA = re.compile(r" via ([^\s/]+)(?:/([^\s/]+))?")
_USING_NET = re.compile(r"Using network (\S.*?)\s*$")
_NVLS_CHANNELS = re.compile(r"\b(\d+) nvls channels")
_TRANSPORT_FILE = re.compile(
    r"(?:^|[\s/])(?:(?:transport/)?(p2p|shm|net_ib|net_socket|nvls|coll_net)(?:/\w+)?\.cc"
    r"|(ib_plugin|p2p_plugin)\.c):\d+"
)
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using ?(?:\[\d+\])?([^\s:<\[\]]+):(\S+?)<\d+>")
_SOCKET_IF = re.compile(r"\[\d+\]([^\s:<\[\]]+):(\S+?)<\d+>")
_IB_DEV = re.compile(r"([A-Za-z][\w.\-]*:\d+/(?:IB|RoCE|ETH))\b")
_OOB = re.compile(r"OOB ([^\s:<]+):(\S+?)<\d+>")
_TRACE = re.compile(r"(?:^|[\s/])(init|bootstrap|proxy|enqueue|group)\.cc:\d+ -> ([1-9]\d*)")
_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:")
_RANK_TAG = re.compile(r"\[(?:PG (?:ID )?0 (?:PG GUID \S+ )?)?Rank (\d+)\]")
_GLOO_RANK = re.compile(r"\[Gloo\] Rank (\d+)")
# glog severity prefix of PyTorch C++ logs: "[W socket.cpp:464]", "[E1206 18:44:12.7 x.cpp:607]".
_GLOG = re.compile(
    r"(?:^|[\s\[])([IWEF])(?:\d{4} [\d:.]+(?: +\d+)?)? ?[\w.\-]+\.(?:cpp|cc|hpp|h):\d+\]"
)
_SEQ = re.compile(r"SeqNum=(\d+)")
_OPTYPE = re.compile(r"OpType=(\w+)")
_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)")
_BARRIER = re.compile(r"Ranks? ([\d, ]+?) failed to pass monitoredBarrier")
_NCCL_PEER = re.compile(r"([\w.:%\-]+)<(\d+)>")
_C10D_PEER = re.compile(r"\[([^\]\s]+)\]:(\d+)|\(([^,()\s]+), (\d+)\)")
_IB_STATUS = re.compile(r"status=(?:[A-Za-z_ ]*\()?(\d+)")
_IB_VENDOR = re.compile(r"vendor[ _]err[ =](\d+)")
_BYTES = re.compile(r"(\d{4,}) bytes|size (\d{4,})")
_BENIGN_WARN = re.compile(r"ignoring|Failed to open libibverbs|NET/Plugin|No plugin found")

# (failure class, cause, pattern) tried in order on error lines; the first match wins.
# Class None marks a failure whose cause is not recognised.
_RULES: Final[tuple[tuple[str | None, str, re.Pattern[str]], ...]] = (
    (
        "cuda-oom",
        "oom",
        re.compile(
            r"out of memory|Failed to CUDA (?:calloc|malloc|host alloc)"
            r"|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation",
            re.IGNORECASE,
        ),
    ),
    ("shm", "shm", re.compile(r"/dev/shm|shared memory|shmutils|posix_fallocate|\bshm\.", re.I)),
    ("ib", "qp", re.compile(r"ibv_create_qp")),
    ("ib", "mr", re.compile(r"ibv_reg_(?:dmabuf_)?mr")),
    ("ib", "modify_qp", re.compile(r"ibv_modify_qp")),
    ("ib", "completion", re.compile(r"Got completion from peer")),
    ("ib", "async", re.compile(r"Got async (?:error )?event")),
    ("ib", "ib", re.compile(r"\bibv_\w+ failed|NET/IB\w*\s*:.*(?:fail|error|unable)", re.I)),
    (
        "connection",
        "no-iface",
        re.compile(
            r"no socket interface found|No usable listening interface|Unable to find address for",
            re.IGNORECASE,
        ),
    ),
    ("connection", "addr-in-use", re.compile(r"Address already in use|EADDRINUSE")),
    ("connection", "refused", re.compile(r"Connection refused|ECONNREFUSED")),
    (
        "connection",
        "unreachable",
        re.compile(
            r"No route to host|Network is unreachable|Name or service not known"
            r"|Temporary failure in name resolution|Cannot assign requested address"
        ),
    ),
    (
        "connection",
        "closed",
        re.compile(
            r"Connection (?:reset|closed) by (?:remote )?peer|Software caused connection abort"
            r"|Broken pipe|Transport endpoint is not connected|ECONNRESET|ECONNABORTED"
        ),
    ),
    (
        "connection",
        "rendezvous",
        re.compile(
            r"clients joined|waiting for clients|Rendezvous\w*(?:Timeout|Connection|Closed)Error"
            r"|client socket has timed out|connect\(\) timed out|Connection timed out"
            r"|Socket Timeout",
            re.IGNORECASE,
        ),
    ),
    ("connection", "remote", re.compile(r"ncclRemoteError|remote process exit", re.I)),
    ("other", "dup-gpu", re.compile(r"Duplicate GPU detected")),
    ("other", "invalid", re.compile(r"invalid usage|ncclInvalidUsage|ncclInvalidArgument", re.I)),
    ("other", "cuda", re.compile(r"Cuda failure|unhandled cuda error|CUDA error", re.I)),
    ("timeout", "watchdog", re.compile(r"collective operation timeout|Timeout at NCCL work")),
    ("timeout", "barrier", re.compile(r"failed to pass monitoredBarrier")),
    (
        "timeout",
        "stuck",
        re.compile(r"watchdog got stuck|Heartbeat monitor timed out|Timed out waiting \d+ms"),
    ),
    (
        None,
        "error",
        re.compile(
            r"NCCL error|nccl\w*Error|unhandled system error|internal error"
            r"|Failed to execute operation",
            re.IGNORECASE,
        ),
    ),
)

_FILE_TRANSPORTS: Final = {
    "p2p": "P2P",
    "shm": "SHM",
    "net_ib": "IB",
    "net_socket": "Socket",
    "nvls": "NVLS",
    "coll_net": "CollNet",
    "ib_plugin": "IB",
}
_IB_STATUS_NAMES: Final = {
    4: "local protection error",
    5: "work request flushed",
    10: "remote access error",
    11: "remote operation error",
    12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded",
}


@dataclass
class NcclSummary:
    """What a job's communication lines say.

    ``None`` means the lines do not say. ``transport`` maps each transport
    seen (``IB``, ``Socket``, ``P2P``, ``SHM``, ``NVLS``, ``CollNet`` or a
    net plugin's name) to the sorted global ranks known to use it; the list
    is empty where no line tied it to a rank. ``init_complete`` is ``True``
    when a communicator reported ``Init COMPLETE`` and no rank's init
    failed (NCCL's init is collective, so one rank completing means every
    rank got through bootstrap), ``False`` when a rank's init failed.
    ``failure`` is one of :data:`FAILURES`. ``raw_lines`` holds the NCCL
    lines and ``comm_lines`` the other c10d / gloo lines, each bounded to
    the first :data:`RAW_HEAD` and the last :data:`RAW_TAIL`; the
    ``*_dropped`` counts say how many were left out between the two.
    """

    nccl_version: str | None = None
    transport: dict[str, list[int]] = field(default_factory=dict)
    interfaces: list[str] = field(default_factory=list)
    nranks: int | None = None
    init_complete: bool | None = None
    warnings: int = 0
    failure: str = "none"
    diagnosis: str = ""
    backend: str = "unknown"
    raw_lines: list[str] = field(default_factory=list)
    comm_lines: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    raw_dropped: int = 0
    comm_dropped: int = 0


@dataclass
class _Finding:
    cause: str
    text: str
    source: Source | None
    host: str | None
    dev: str | None


class _Lines:
    """The first RAW_HEAD and the last RAW_TAIL lines added."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=RAW_TAIL)
        self.seen = 0

    def add(self, line: str) -> None:
        self.seen += 1
        if len(self.head) < RAW_HEAD:
            self.head.append(line)
        else:
            self.tail.append(line)

    def lines(self) -> list[str]:
        return [*self.head, *self.tail]

    def dropped(self) -> int:
        return self.seen - len(self.head) - len(self.tail)


def _add(bounded: set[Any] | dict[Any, Any], key: Any, value: Any = None) -> None:
    """Add to a set (or dict) unless it already holds _MAX_TRACKED entries."""
    if key in bounded or len(bounded) >= _MAX_TRACKED:
        return
    if isinstance(bounded, dict):
        bounded[key] = value
    else:
        bounded.add(key)


def _relevant(line: str) -> bool:
    for marker in _MARKERS:
        if marker in line:
            return True
    return False


class NcclParser:
    """Incremental reader of one job's log lines (all ranks interleaved).

    :meth:`feed` takes every plain line, with the global rank that printed it
    when the caller knows it; without one the rank is read from the line
    (``comm ... rank 3 nranks 8``, ``[rank3]:``, ``[Rank 3]``) or lines are
    grouped by NCCL's ``host:pid``. ``backend`` is the process-group backend
    when known from elsewhere; otherwise the lines decide. Memory is bounded
    whatever the number of lines.
    """

    def __init__(self, backend: str | None = None) -> None:
        self._backend_hint = backend
        self._nccl_seen = False
        self._nccl_info_seen = False
        self._gloo_seen = False
        self._raw = _Lines()
        self._comm = _Lines()
        self._version: str | None = None
        self._nranks: int | None = None
        self._multi_node: bool | None = None
        self._warnings = 0
        self._first_warning: str | None = None
        self._first_error_warning: str | None = None
        self._oom_bytes = 0
        self._proc_rank: dict[str, tuple[int, int]] = {}  # host:pid -> (comm size, rank)
        self._ranks: set[int] = set()
        self._hosts: set[str] = set()
        self._transports: dict[str, set[Source]] = {}
        self._gdr = False
        self._net_ifaces: dict[str, None] = {}
        self._ib_devs: dict[str, None] = {}
        self._addr_host: dict[str, str] = {}
        self._hints: dict[str, tuple[str, str]] = {}  # kind -> (interface, address)
        self._no_rdma: str | None = None
        self._ib_disabled = False
        self._init_done: set[Source] = set()
        self._init_failed: set[Source] = set()
        self._bootstrap_failed = False
        self._found: dict[tuple[str | None, str], _Finding] = {}
        self._class_sources: dict[str | None, set[Source]] = {}
        self._watchdog: dict[Source, tuple[str | None, str | None, int | None]] = {}
        self._pending_last_error: set[Source | None] = set()

    # -- feeding -----------------------------------------------------------

    def feed(self, line: str, rank: int | None = None) -> None:
        """Take one log line (with or without its line ending)."""
        if self._pending_last_error:
            waiting = rank if rank is not None else self._torch_rank(line)
            if waiting in self._pending_last_error:
                # The line after PyTorch's "Last error:" is NCCL's own message.
                self._pending_last_error.discard(waiting)
                self._raw.add(line.rstrip("\r\n"))
                self._classify(_strip_rank_prefix(line), waiting, None, None)
                return
        if not _relevant(line):
            return
        text = line.rstrip("\r\n")
        is_nccl = "NCCL" in text or "nccl" in text
        if is_nccl:
            self._nccl_seen = True
            self._raw.add(text)
        else:
            if "gloo" in text or "Gloo" in text:
                self._gloo_seen = True
            self._comm.add(text)

        header = _HEADER.search(text) if is_nccl else None
        host = dev = proc = None
        if header is not None:
            host, dev = header.group(1), header.group(3)
            proc = f"{host}:{header.group(2)}"
            _add(self._hosts, host)
        src: Source | None
        if rank is not None:
            src = rank
            if proc is not None:
                self._proc_rank.pop(proc, None)
                _add(self._proc_rank, proc, (_EXPLICIT, rank))
        elif proc is not None:
            src = proc
        else:
            src = self._torch_rank(text)
        if isinstance(src, int):
            _add(self._ranks, src)

        if "NCCL version" in text and self._version is None:
            version = _VERSION.search(text)
            if version is not None:
                self._version = version.group(1)
        if "NCCL WARN" in text:
            self._warnings += 1
            message = text[text.index("NCCL WARN") + 10 :].strip()
            if self._first_warning is None:
                self._first_warning = message[:_MAX_TEXT]
            if self._first_error_warning is None and not _BENIGN_WARN.search(message):
                self._first_error_warning = message[:_MAX_TEXT]
            self._classify(message, src, host, dev)
        elif header is None and "NCCL INFO" not in text:
            level = _GLOG.search(text)
            if level is None or level.group(1) in "EF":
                self._classify(_strip_rank_prefix(text), src, host, dev)
        if "Last error:" in text:
            rest = text[text.index("Last error:") + 11 :].strip()
            if not rest:
                _add(self._pending_last_error, src)
        if is_nccl:
            self._parse_nccl(text, src, proc, host)
        elif "[Gloo]" in text:
            peers = _GLOO_PEERS.search(text)
            if peers is not None:
                self._see_nranks(int(peers.group(2)) + 1)

    def _torch_rank(self, text: str) -> int | None:
        for pattern in (_RANK_PREFIX, _RANK_TAG, _GLOO_RANK):
            found = pattern.search(text)
            if found is not None:
                return int(found.group(1))
        return None

    def _see_nranks(self, n: int) -> None:
        if self._nranks is None or n > self._nranks:
            self._nranks = n

    def _parse_nccl(
        self, text: str, src: Source | None, proc: str | None, host: str | None
    ) -> None:
        if "NCCL INFO" in text:
            self._nccl_info_seen = True
        if "anks " in text:
            comm = _COMM.search(text)
            if comm is not None:
                comm_rank, size = int(comm.group(1)), int(comm.group(2))
                self._see_nranks(size)
                if proc is not None:
                    known = self._proc_rank.get(proc)
                    if known is None:
                        _add(self._proc_rank, proc, (size, comm_rank))
                    elif size > known[0]:
                        self._proc_rank[proc] = (size, comm_rank)
                nodes = _NNODES.search(text)
                if nodes is not None:
                    self._multi_node = int(nodes.group(1)) > 1 or bool(self._multi_node)
        if "global rank: " in text:
            pg = _PG_SIZE.search(text)
            if pg is not None:
                self._see_nranks(int(pg.group(1)))
        if "Init COMPLETE" in text and src is not None:
            _add(self._init_done, src)
        if " -> " in text:
            if ".c" in text:
                trace = _TRACE.search(text)
                if trace is not None:
                    self._failed(None, "error", text.partition("NCCL INFO")[2] or text, src)
                    if trace.group(1) in ("init", "bootstrap") and src not in self._init_done:
                        _add(self._init_failed, src if src is not None else "?")
                    if trace.group(1) == "bootstrap":
                        self._bootstrap_failed = True
            if " via " in text:
                via = _VIA.search(text)
                if via is not None:
                    self._see_via(via.group(1), via.group(2), src)
                    if "GDRDMA" in text:
                        self._gdr = True
        elif ("Channel " in text or "Ring " in text) and " : " in text:
            ring = _RING.search(text)
            if ring is not None:
                members = [int(n) for n in ring.group(1).split()]
                if sorted(members) == list(range(len(members))):
                    self._see_nranks(len(members))
        if ".c" in text:
            source_file = _TRANSPORT_FILE.search(text)
            if source_file is not None:
                self._see_transport(_FILE_TRANSPORTS[source_file.group(1) or "ib_plugin"], src)
        if "NET/IB" in text and "Got " in text:  # completion or async event errors
            self._see_transport("IB", src)
        if "Using" in text:
            self._parse_using(text, src, host)
        if "NVLS" in text or "nvls" in text:
            self._parse_nvls(text, src)
        if "No device found" in text and "NET/IB" in text:
            self._no_rdma = self._no_rdma or "no InfiniBand/RoCE device was found"
        elif "Failed to open libibverbs" in text:
            self._no_rdma = self._no_rdma or "libibverbs is not installed"
        elif "NCCL_IB_DISABLE set by environment to 1" in text:
            self._ib_disabled = True

    def _parse_using(self, text: str, src: Source | None, host: str | None) -> None:
        if "Using network" in text:
            net = _USING_NET.search(text)
            if net is not None:
                self._see_transport(_net_name(net.group(1)), src)
        elif "NET/IB" in text:
            before_oob, _, oob = text.partition("OOB")
            devices = _IB_DEV.findall(before_oob.partition("Using")[2])
            if devices:
                self._see_transport("IB", src)
            for device in devices:
                if len(self._ib_devs) < _MAX_IFACES:
                    self._ib_devs.setdefault(device, None)
            oob_if = _OOB.search("OOB" + oob) if oob else None
            if oob_if is not None:
                self._see_iface(oob_if.group(1), oob_if.group(2), host)
        elif "NET/Socket" in text:
            found = False
            for iface, address in _SOCKET_IF.findall(text.partition("Using")[2]):
                self._see_iface(iface, address, host)
                found = True
            if found:
                self._see_transport("Socket", src)
        elif "Bootstrap" in text:
            boot = _BOOTSTRAP.search(text)
            if boot is not None:
                self._see_iface(boot.group(1), boot.group(2), host)

    def _parse_nvls(self, text: str, src: Source | None) -> None:
        if "NVLS multicast support is available" in text:
            if "transport disabled" not in text:
                self._see_transport("NVLS", src)
        elif "NVLS Head" in text or "Connected NVLS" in text:
            self._see_transport("NVLS", src)
        else:
            channels = _NVLS_CHANNELS.search(text)
            if channels is not None and int(channels.group(1)) > 0:
                self._see_transport("NVLS", src)

    def _see_via(self, first: str, second: str | None, src: Source | None) -> None:
        if first == "NET" and second:
            self._see_transport(_net_name(second), src)
        elif first in ("P2P", "SHM", "NVLS"):
            self._see_transport(first, src)
        elif first == "direct":  # NCCL < 2.7: "via direct shared memory"
            self._see_transport("SHM", src)
        elif first.lower() == "collnet":
            self._see_transport("CollNet", src)

    def _see_transport(self, name: str, src: Source | None) -> None:
        sources = self._transports.setdefault(name, set())
        if src is not None:
            _add(sources, src)

    def _see_iface(self, iface: str, address: str, host: str | None) -> None:
        if len(self._net_ifaces) < _MAX_IFACES:
            self._net_ifaces.setdefault(iface, None)
        if iface == "lo" or address.startswith(("127.", "::1")):
            self._hints.setdefault("loopback", (iface, address))
        elif address.lower().startswith(("fe80:", "169.254.")):
            self._hints.setdefault("link-local", (iface, address))
        elif address.startswith("172.17."):
            self._hints.setdefault("docker", (iface, address))
        if host is not None and address[:1].isdigit():
            owner = self._addr_host.get(address)
            if owner is None:
                _add(self._addr_host, address, host)
            elif owner != host:
                self._hints.setdefault("shared-address", (iface, address))

    def _classify(self, text: str, src: Source | None, host: str | None, dev: str | None) -> None:
        for failure, cause, pattern in _RULES:
            if pattern.search(text):
                self._failed(failure, cause, text, src, host, dev)
                if failure == "timeout":
                    self._see_timeout(cause, text, src)
                return

    def _failed(
        self,
        failure: str | None,
        cause: str,
        text: str,
        src: Source | None,
        host: str | None = None,
        dev: str | None = None,
    ) -> None:
        key = (failure, cause)
        if failure == "cuda-oom":
            size = _BYTES.search(text)
            if size is not None:
                self._oom_bytes = max(self._oom_bytes, int(size.group(1) or size.group(2)))
        if key not in self._found:
            self._found[key] = _Finding(cause, text.strip()[:_MAX_TEXT], src, host, dev)
        if src is not None:
            _add(self._class_sources.setdefault(failure, set()), src)

    def _see_timeout(self, cause: str, text: str, src: Source | None) -> None:
        if cause != "watchdog" or src is None or "collective operation timeout" not in text:
            return
        seq, op, limit = _SEQ.search(text), _OPTYPE.search(text), _TIMEOUT_MS.search(text)
        _add(
            self._watchdog,
            src,
            (
                seq.group(1) if seq else None,
                op.group(1) if op else None,
                int(limit.group(1)) if limit else None,
            ),
        )

    # -- summary -------------------------------------------------------------

    def summary(self) -> NcclSummary:
        """The summary of every line fed so far (the parser stays usable)."""
        transport = {
            name: sorted({r for r in (self._resolve(s) for s in sources) if r is not None})
            for name, sources in self._transports.items()
        }
        init: bool | None = None
        if self._init_failed - self._init_done:
            init = False
        elif self._init_done:
            init = True
        failure, finding = self._failure()
        return NcclSummary(
            nccl_version=self._version,
            transport=transport,
            interfaces=[*self._net_ifaces, *self._ib_devs],
            nranks=self._nranks,
            init_complete=init,
            warnings=self._warnings,
            failure=failure,
            diagnosis=_sentence(self._diagnose(failure, finding, transport)),
            backend=self._backend(),
            raw_lines=self._raw.lines(),
            comm_lines=self._comm.lines(),
            ranks=sorted(self._ranks | {rank for _, rank in self._proc_rank.values()}),
            raw_dropped=self._raw.dropped(),
            comm_dropped=self._comm.dropped(),
        )

    def _resolve(self, src: Source | None) -> int | None:
        if isinstance(src, int):
            return src
        if src is not None and src in self._proc_rank:
            return self._proc_rank[src][1]
        return None

    def _backend(self) -> str:
        if self._backend_hint:
            return self._backend_hint
        if self._nccl_seen:
            return "nccl"
        return "gloo" if self._gloo_seen else "unknown"

    def _hint(self) -> tuple[str, str, str] | None:
        """The suspect network configuration, as (kind, interface, address)."""
        multi_node = self._multi_node or len(self._hosts) > 1
        for kind in ("link-local", "loopback", "shared-address", "docker"):
            if kind not in self._hints:
                continue
            if kind == "loopback" and self._multi_node is False:
                continue
            if kind == "docker" and not multi_node:
                continue
            return (kind, *self._hints[kind])
        return None

    def _failure(self) -> tuple[str, _Finding | None]:
        for failure in _ROOT_CAUSE_ORDER:
            for rule_failure, cause, _ in _RULES:
                if rule_failure == failure and (failure, cause) in self._found:
                    return failure, self._found[(failure, cause)]
        if self._hint() is not None:
            return "other", None
        if (None, "error") in self._found:
            return "other", self._found[(None, "error")]
        return "none", None

    def _where(self, finding: _Finding) -> str:
        rank = self._resolve(finding.source)
        if rank is not None:
            return f" on rank {rank}"
        if finding.host is not None:
            return f" on {finding.host} GPU {finding.dev}"
        return ""

    def _diagnose(
        self, failure: str, finding: _Finding | None, transport: dict[str, list[int]]
    ) -> str:
        hint = self._hint()
        if failure == "none":
            return self._diagnose_healthy(transport)
        if hint is not None and (finding is None or failure in ("connection", "timeout")):
            cause, fix = _hint_text(*hint)
            if failure == "timeout":
                cause = f"collectives timed out, and {cause}"
            return f"{cause}: {fix}"
        assert finding is not None
        where = self._where(finding)
        if failure == "cuda-oom":
            others = any(found not in (None, "cuda-oom") for found, _ in self._found)
            return _oom_text(where, self._oom_bytes, others)
        if failure == "shm":
            size = _size_text(finding.text)
            return (
                f"/dev/shm is too small for NCCL's shared-memory segments{where}"
                f"{f' ({size} each)' if size else ''}, as with a container's 64 MB default: "
                "mount a memory-backed emptyDir at /dev/shm (Kubernetes) or give the container "
                "--shm-size or --ipc=host"
            )
        if failure == "ib":
            return _ib_text(finding, where)
        if failure == "connection":
            return _connection_text(finding, where, self._bootstrap_failed)
        if failure == "timeout":
            return self._timeout_text(finding)
        return _other_text(finding, where, self._first_error_warning)

    def _timeout_text(self, finding: _Finding) -> str:
        if finding.cause == "barrier":
            late = _BARRIER.search(finding.text)
            who = f"ranks {late.group(1)}" if late else "some ranks"
            return (
                f"{who} never reached the monitored barrier: see what they were doing "
                "(py-spy dump) and why they fell behind"
            )
        if finding.cause == "stuck":
            if "Timed out waiting" in finding.text:
                return (
                    "a gloo send/recv timed out: a peer rank stalled or exited; "
                    "read that rank's log for its first error"
                )
            return (
                "the ProcessGroupNCCL watchdog itself got stuck, so a CUDA or NCCL call hung: "
                "check GPU health (nvidia-smi, Xid errors in dmesg) on the ranks that stopped"
            )
        reports = {self._resolve(s): v for s, v in self._watchdog.items()}
        ranks = sorted(r for r in reports if r is not None)
        ranks += sorted(
            r
            for r in map(self._resolve, self._class_sources.get("timeout", ()))
            if r is not None and r not in reports
        )
        ops = {(seq, op) for seq, op, _ in reports.values()}
        limits = {limit for _, _, limit in reports.values() if limit}
        limit_text = f" after {max(limits) // 1000} s" if limits else ""
        who = f"ranks {_ranks_text(ranks)}" if ranks else "the reporting ranks"
        silent = ""
        if self._nranks and ranks:
            missing = sorted(set(range(self._nranks)) - set(ranks))
            if missing and len(missing) < self._nranks:
                silent = f"; ranks {_ranks_text(missing)} reported no timeout, look there first"
        if len(ops) > 1:
            detail = ", ".join(
                f"rank {r}: {op or '?'} SeqNum {seq or '?'}"
                for r, (seq, op, _) in sorted(
                    ((r, v) for r, v in reports.items() if r is not None), key=lambda x: x[0]
                )[:4]
            )
            return (
                f"ranks timed out in different collectives ({detail}), a desync: the ranks took "
                "different code paths; run with TORCH_DISTRIBUTED_DEBUG=DETAIL to find the "
                "mismatched call"
            )
        seq, op = next(iter(ops)) if ops else (None, None)
        what = f" ({op}, SeqNum {seq})" if op or seq else ""
        return (
            f"{who} timed out in the same collective{what}{limit_text}, so one rank stalled or "
            f"the network hung (not a desync){silent}: find the slow rank (py-spy dump, "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1) before raising the timeout"
        )

    def _diagnose_healthy(self, transport: dict[str, list[int]]) -> str:
        backend = self._backend()
        nets = [name for name in transport if name not in ("P2P", "SHM", "NVLS", "CollNet")]
        if backend == "gloo" or (not self._nccl_seen and self._gloo_seen):
            size = f" with {self._nranks} ranks" if self._nranks else ""
            return f"the gloo backend is in use{size} (no NCCL) and reports no errors"
        if not transport and not self._nccl_info_seen:
            if backend == "nccl":
                return (
                    "no NCCL errors, but NCCL's own log is off: set NCCL_DEBUG=INFO to see "
                    "which transports and interfaces it picked"
                )
            return "no NCCL or c10d lines yet: set NCCL_DEBUG=INFO to see NCCL's choices"
        ifaces = ", ".join(self._net_ifaces) or "the default interface"
        if "Socket" in nets and len(nets) == 1:
            if self._ib_disabled:
                return (
                    f"NCCL uses TCP sockets on {ifaces} because NCCL_IB_DISABLE=1: "
                    "if the nodes have RDMA NICs, set NCCL_IB_DISABLE=0"
                )
            why = self._no_rdma or "no RDMA network was selected"
            return (
                f"{why}, so NCCL fell back to TCP sockets on {ifaces}, which works but limits "
                "inter-node bandwidth: if the nodes have InfiniBand/RoCE, expose the RDMA "
                "devices to the container and keep NCCL_IB_DISABLE=0 (on AWS, use EFA with "
                "the aws-ofi-nccl plugin)"
            )
        if "Socket" in nets and len(nets) > 1:
            slow = _ranks_text(transport["Socket"])
            fast = ", ".join(name for name in nets if name != "Socket")
            return (
                f"{f'ranks {slow}' if slow else 'some ranks'} use TCP sockets while the others "
                f"use {fast}: "
                "check the RDMA device and NCCL_IB_HCA on those nodes"
            )
        parts = []
        for name in transport:
            label = name
            if name == "IB" and any(dev.endswith("/RoCE") for dev in self._ib_devs):
                label = "IB (RoCE)"
            if name in nets and self._gdr:
                label += " with GPUDirect RDMA"
            parts.append(label)
        version = f"NCCL {self._version}" if self._version else "NCCL"
        size = f" for {self._nranks} ranks" if self._nranks else ""
        over = f" over {' + '.join(parts)}" if parts else ""
        note = ""
        if self._first_warning is not None:
            count = "1 warning" if self._warnings == 1 else f"{self._warnings} warnings"
            note = f" ({count} that did not stop it: '{self._first_warning}')"
        return f"{version} set up{size}{over} with no errors{note}: nothing to fix"


def _net_name(name: str) -> str:
    """'IB', 'IBext', 'IBext_v8' -> 'IB'; 'Socket' -> 'Socket'; a plugin keeps its name."""
    if name.upper().startswith("IB"):
        return "IB"
    if name.lower() == "socket":
        return "Socket"
    return name


def _strip_rank_prefix(text: str) -> str:
    found = _RANK_PREFIX.match(text)
    return text[found.end() :].strip() if found else text.strip()


def _ranks_text(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    return format_ranks(ranks).replace(",", ", ")


def _size_text(text: str) -> str:
    found = _BYTES.search(text)
    if found is None:
        return ""
    size = int(found.group(1) or found.group(2))
    return f"{size / 2**20:.1f} MiB"


def _peer(text: str) -> str:
    found = _NCCL_PEER.search(text)
    if found is not None:
        return f"{found.group(1)}:{found.group(2)}"
    found = _C10D_PEER.search(text)
    if found is not None:
        return f"{found.group(1) or found.group(3)}:{found.group(2) or found.group(4)}"
    return "the peer"


def _hint_text(kind: str, iface: str, address: str) -> tuple[str, str]:
    """(cause, fix) for a suspect network configuration."""
    if kind == "link-local":
        return (
            f"NCCL's sockets use {iface}, which has only the IPv6 link-local address {address} "
            "that other nodes cannot connect to",
            "set NCCL_SOCKET_IFNAME to an interface with a routable IPv4 address, or "
            "NCCL_SOCKET_FAMILY=AF_INET",
        )
    if kind == "loopback":
        return (
            f"NCCL's sockets are on the loopback interface ({iface}, {address}), which cannot "
            "reach other nodes",
            "for a multi-node job set NCCL_SOCKET_IFNAME to the routable interface "
            "(and NCCL_IB_DISABLE=0 if the nodes have RDMA)",
        )
    private = "private bridge networks" if kind == "shared-address" else "the Docker bridge"
    return (
        f"NCCL's sockets use {iface} at {address} on {private}, which other hosts cannot reach "
        "through NAT",
        "run the containers with --network=host (and --ipc=host) or set NCCL_SOCKET_IFNAME "
        "to an interface the nodes share",
    )


def _oom_text(where: str, size: int, consequences: bool) -> str:
    alloc = f" allocating {size / 2**20:.1f} MiB" if size else ""
    after = ", and the errors elsewhere follow from it" if consequences else ""
    return (
        f"NCCL ran out of GPU memory{where}{alloc} for its buffers{after}: create the process "
        "group and run a first collective before the model fills the GPU, or leave headroom "
        "(smaller batch, lower NCCL_BUFFSIZE)"
    )


def _ib_text(finding: _Finding, where: str) -> str:
    if finding.cause == "qp":
        return (
            f"NCCL could not create InfiniBand queue pairs{where}: raise the locked-memory "
            "limit (ulimit -l unlimited, memlock in the container runtime) and make the RDMA "
            "devices available inside the container (/dev/infiniband, IPC_LOCK)"
        )
    if finding.cause == "mr":
        return (
            f"NCCL could not register memory with the RDMA device{where}: raise the "
            "locked-memory limit (ulimit -l unlimited) and for GPU buffers load nvidia-peermem, "
            "or turn GPUDirect RDMA off with NCCL_NET_GDR_LEVEL=LOC"
        )
    if finding.cause == "modify_qp":
        return (
            f"NCCL could not bring up InfiniBand/RoCE queue pairs to the peer{where}: check "
            "NCCL_IB_GID_INDEX (RoCE v2 usually needs the IPv4-mapped GID), the port state "
            "(ibstat) and the routes between the nodes"
        )
    if finding.cause == "completion":
        status = _IB_STATUS.search(finding.text)
        vendor = _IB_VENDOR.search(finding.text)
        code = int(status.group(1)) if status else -1
        name = _IB_STATUS_NAMES.get(code, "an error")
        detail = f"status={code} ({name}{f', vendor err {vendor.group(1)}' if vendor else ''})"
        peer = _peer(finding.text)
        if code in (12, 13):
            return (
                f"RDMA transfers with {peer} failed{where} with {detail}, so the peer became "
                "unreachable on the fabric (link flap, PFC/ECN or GID/route misconfiguration): "
                "check NIC and switch port counters and the lossless-network setup"
            )
        if code in (4, 10, 11):
            return (
                f"RDMA transfers with {peer} failed{where} with {detail}, a memory registration "
                "or access problem: check GPUDirect RDMA (nvidia-peermem, PCIe ACS) or turn it "
                "off with NCCL_NET_GDR_LEVEL=LOC"
            )
        return (
            f"RDMA transfers with {peer} failed{where} with {detail}: read the first error on "
            "both ends, then check the link (ibstat) and switch counters"
        )
    if finding.cause == "async":
        return (
            f"the RDMA device reported an asynchronous error{where} ({finding.text}): "
            "check the port (ibstat), cables and switch"
        )
    return (
        f"the InfiniBand/RoCE transport failed{where} ({finding.text}): check the RDMA device "
        "(ibstat, ibv_devinfo) and NCCL_IB_HCA"
    )


def _connection_text(finding: _Finding, where: str, bootstrap: bool) -> str:
    peer = _peer(finding.text)
    if finding.cause == "no-iface":
        return (
            f"no usable network interface matches NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME{where}: "
            "unset it or name an interface that exists in the container"
        )
    if finding.cause == "addr-in-use":
        return (
            "the rendezvous port is already in use (an earlier job still running?): "
            "stop it or choose another MASTER_PORT"
        )
    if finding.cause == "refused" and bootstrap:
        return (
            f"a rank could not reach the NCCL bootstrap at {peer} (connection refused), so "
            "nothing listens there: the rendezvous is stale or points at the wrong host (a "
            "leftover file:// init file, a wrong MASTER_ADDR) or rank 0 died; use a fresh "
            "rendezvous and check that every node reaches the same live MASTER_ADDR:MASTER_PORT"
        )
    if finding.cause == "refused":
        return (
            f"the connection to {peer} was refused{where}: nothing listens there (the peer "
            "exited or the port is wrong); read the peer's log first, then check "
            "MASTER_ADDR/MASTER_PORT and firewalls"
        )
    if finding.cause == "unreachable":
        return (
            f"{peer} is unreachable{where}: the chosen interface has no route to the other "
            "nodes; set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface they share"
        )
    if finding.cause == "rendezvous":
        return (
            f"the rendezvous timed out before every rank joined{where}: some workers did not "
            "start or cannot reach MASTER_ADDR:MASTER_PORT; check that every pod or node is "
            "running and can connect to it"
        )
    if finding.cause == "remote":
        return (
            f"a peer rank exited or its network failed{where} (ncclRemoteError): the root "
            "cause is the first error in another rank's log"
        )
    return (
        f"the TCP connection to {peer} was aborted or closed{where}: a firewall or a wrong "
        "interface blocks traffic between the nodes, or the peer exited; set "
        "NCCL_SOCKET_IFNAME to the interface the nodes share, open the ports between them "
        "and read the peer's log"
    )


def _other_text(finding: _Finding, where: str, first_warning: str | None) -> str:
    if finding.cause == "dup-gpu":
        return (
            f"two ranks were given the same GPU{where}: call torch.cuda.set_device(local_rank) "
            "before init_process_group and check CUDA_VISIBLE_DEVICES and nproc_per_node"
        )
    if finding.cause == "invalid":
        return (
            f"NCCL rejected a call as invalid usage{where} ({finding.text}): the ranks disagree "
            "on a collective's arguments or a communicator is misused; run with "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL"
        )
    if finding.cause == "cuda":
        return (
            f"a CUDA call inside NCCL failed{where} ({finding.text}): check GPU health "
            "(nvidia-smi, Xid errors in dmesg) and that the driver supports the CUDA version"
        )
    detail = first_warning or finding.text
    return (
        f"NCCL failed{where} ({detail}): rerun with NCCL_DEBUG=INFO and "
        "NCCL_DEBUG_SUBSYS=INIT,NET and read the first WARN of the first failing rank"
    )


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def summarize(lines: Iterable[str]) -> NcclSummary:
    """Summarise lines (e.g. an open log file) with a fresh :class:`NcclParser`."""
    parser = NcclParser()
    for line in lines:
        parser.feed(line)
    return parser.summary()


def summary_to_json(s: NcclSummary) -> dict[str, Any]:
    """The JSON object ``disttrain nccl LOGFILE --json`` prints (exactly these keys)."""
    return {
        "nccl_version": s.nccl_version,
        "transport": {name: list(ranks) for name, ranks in s.transport.items()},
        "interfaces": list(s.interfaces),
        "nranks": s.nranks,
        "init_complete": s.init_complete,
        "warnings": s.warnings,
        "failure": s.failure,
        "diagnosis": s.diagnosis,
    }


def format_summary(s: NcclSummary) -> str:
    """A short multi-line text for people."""

    def unknown(value: object) -> str:
        return "unknown" if value is None or value == "" else str(value)

    transports = "; ".join(
        f"{name} (ranks {_ranks_text(ranks)})" if ranks else name
        for name, ranks in s.transport.items()
    )
    init = {True: "complete", False: "failed", None: "unknown"}[s.init_complete]
    rows = [
        ("backend", s.backend + (f", NCCL {s.nccl_version}" if s.nccl_version else "")),
        ("ranks", unknown(s.nranks)),
        ("init", init),
        ("transport", transports or "unknown"),
        ("interfaces", ", ".join(s.interfaces) or "unknown"),
        ("warnings", str(s.warnings)),
        ("failure", s.failure),
        ("diagnosis", s.diagnosis),
    ]
    return "\n".join(f"{name:<11}{value}" for name, value in rows)
