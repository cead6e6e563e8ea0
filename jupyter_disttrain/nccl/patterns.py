"""The patterns NCCL, c10d and gloo lines are read with, and the failure rules."""

from __future__ import annotations

import re
from typing import Final

#: Every value of :attr:`NcclSummary.failure`.
FAILURES: Final = ("none", "connection", "ib", "cuda-oom", "timeout", "shm", "other")
#: ``raw_lines`` and ``comm_lines`` keep the first ``RAW_HEAD`` and the last ``RAW_TAIL`` lines.
RAW_HEAD: Final = 500
RAW_TAIL: Final = 500

ROOT_CAUSE_ORDER: Final = ("cuda-oom", "shm", "ib", "connection", "other", "timeout")
# Causes that explain the errors that follow them, tried first whatever their class.
ROOT_CAUSES: Final = ("oom", "shm", "driver", "version", "dup-gpu", "duplicate-rank")
MAX_TRACKED: Final = 4096  # ranks, processes, hosts and addresses remembered
MAX_IFACES: Final = 32
MAX_TEXT: Final = 240
EXPLICIT: Final = 1 << 62  # "communicator size" of a rank given to feed()

Source = int | str  # a global rank, or "host:pid" until the rank is known

# Substrings that make a line worth a closer look; checked before any regex.
MARKERS: Final = (
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
    "torch/distributed",
    "torchelastic",
    "Cuda failure",
    "CUDA error",
    "CUDA driver",
)

HEADER = re.compile(r"([^\s:\[\]]+):(\d+):\d+ \[(\d+)\] ")
VERSION = re.compile(r"NCCL version:? (\d+\.\d+\.\d+(?:\+cuda\d+(?:\.\d+)*)?)")
COMM = re.compile(r"\brank (\d+) nranks (\d+)", re.IGNORECASE)
NNODES = re.compile(r"\bnNodes (\d+)")
PG_SIZE = re.compile(r"\bsize: (\d+), global rank: (\d+)")
GLOO_PEERS = re.compile(r"\[Gloo\] Rank (\d+) is connected to \d+ peer ranks.*?is : (\d+)")
RING = re.compile(r"\b(?:Channel|Ring) \d+(?:/\d+)? :((?: +\d+)+) *$")
VIA = re.compile(r" via ([^\s/]+)(?:/([^\s/]+))?")
USING_NET = re.compile(r"Using network (\S.*?)\s*$")
NVLS_CHANNELS = re.compile(r"\b(\d+) nvls channels")
TRANSPORT_FILE = re.compile(
    r"(?:^|[\s/])(?:(?:transport/)?(p2p|shm|net_ib|net_socket|nvls|coll_net)(?:/\w+)?\.cc"
    r"|(ib_plugin|p2p_plugin)\.c):\d+"
)
BOOTSTRAP = re.compile(r"Bootstrap ?: Using ?(?:\[\d+\])?([^\s:<\[\]]+):(\S+?)<\d+>")
SOCKET_IF = re.compile(r"\[\d+\]([^\s:<\[\]]+):(\S+?)<\d+>")
IB_DEV = re.compile(r"([A-Za-z][\w.\-]*:\d+/(?:IB|RoCE|ETH))\b")
OOB_ADDR = re.compile(r"OOB ([^\s:<]+):(\S+?)<\d+>")
TRACE = re.compile(r"(?:^|[\s/])(init|bootstrap|proxy|enqueue|group)\.cc:\d+ -> ([1-9]\d*)")
RANK_PREFIX = re.compile(r"\[rank(\d+)\]:")
RANK_TAG = re.compile(r"\[(?:PG (?:ID )?0 (?:PG GUID \S+ )?)?Rank (\d+)\]")
GLOO_RANK = re.compile(r"\[Gloo\] Rank (\d+)")
# glog severity prefix of PyTorch C++ logs: "[W socket.cpp:464]", "[E1206 18:44:12.7 x.cpp:607]".
GLOG = re.compile(
    r"(?:^|[\s\[])([IWEF])(?:\d{4} [\d:.]+(?: +\d+)?)? ?[\w.\-/]+\.(?:cpp|cc|hpp|h|py):\d+\]"
)
SEQ = re.compile(r"SeqNum=(\d+)")
OPTYPE = re.compile(r"OpType=(\w+)")
TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)")
BARRIER = re.compile(r"Ranks? ([\d, ]+?) failed to pass monitoredBarrier")
NCCL_PEER = re.compile(r"([\w.:%\-]+)<(\d+)>")
C10D_PEER = re.compile(r"\[([^\]\s]+)\]:(\d+)|\(([^,()\s]+), (\d+)\)")
IB_STATUS = re.compile(r"status=(?:[A-Za-z_ ]*\()?(\d+)")
IB_VENDOR = re.compile(r"vendor[ _]err[ =](\d+)")
BYTES = re.compile(r"(\d{4,}) bytes|size (\d{4,})")
BENIGN_WARN = re.compile(
    r"ignoring|Failed to open libibverbs|NET/Plugin|No plugin found|falling back|fall back"
)
# A line that says something went wrong, in words no rule knows (never "nothing to fix").
PROBLEM = re.compile(
    r"\b(?:error|errors|failed|failure|fails|abort(?:ed|ing)?|retry(?:ing)?|refused|unreachable"
    r"|timed? ?out|timeout|exception|fatal|invalid|unable|cannot|could not|mismatch)\b",
    re.IGNORECASE,
)
# Settings echoed at start-up ("NCCL_IB_TIMEOUT set by environment to 22") are no problem.
SETTING = re.compile(r"set by environment|\bNCCL_\w+\s*=|\bTORCH_\w+\s*=")
# Lines that show NCCL's communicator initialisation under way.
INIT_STARTED = re.compile(
    r"NCCL version|Bootstrap|bootstrap\.cc|init\.cc|Init START|ncclCommInit|cudaDriverVersion"
)
#: Lines quoted when no rule recognises a problem.
MAX_PROBLEM_LINES: Final = 3

# (failure class, cause, pattern) tried in order on error lines; the first match wins.
# Class None marks a failure whose cause is not recognised.
RULES: Final[tuple[tuple[str | None, str, re.Pattern[str]], ...]] = (
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
    (
        "ib",
        "gid",
        re.compile(
            r"ibv_query_gid|\bGID\b[^\n]*(?:fail|error|invalid|not found|mismatch|unable)"
            r"|(?:fail|error|invalid|unable|no valid)[^\n]*\bGID\b",
            re.I,
        ),
    ),
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
    (
        "connection",
        "gloo-mesh",
        re.compile(r"connectFullMesh failed|gloo/transport/tcp/pair\.cc:\d+\] no error"),
    ),
    (
        "connection",
        "retries",
        re.compile(
            r"retrying|retry \d+|retries exhausted|after \d+ retries|connect\(\) failed", re.I
        ),
    ),
    ("other", "dup-gpu", re.compile(r"Duplicate GPU detected")),
    (
        "other",
        "duplicate-rank",
        re.compile(
            r"duplicate (?:rank|node|worker|global rank)|rank \S+ (?:is )?already (?:exists|"
            r"joined|registered|in use)|(?:appears|checked in|joined) (?:twice|more than once)"
            r"|same rank",
            re.I,
        ),
    ),
    (
        "other",
        "version",
        re.compile(
            r"version mismatch|mismatched versions?|incompatible (?:NCCL|nccl|version|library)"
            r"|undefined symbol|symbol lookup error|version `\S+' not found|\bABI\b"
            r"|NCCL version \S+ (?:does not match|differs)",
            re.I,
        ),
    ),
    (
        "other",
        "driver",
        re.compile(
            r"CUDA driver version is insufficient|cudaErrorInsufficientDriver|driver/library "
            r"version mismatch|no CUDA-capable device|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE"
            r"|Failed to initialize NVML|NVML (?:error|failure)|\bXid\b|cuInit\S* failed"
            r"|cudaErrorSystemDriverMismatch|driver shutting down",
            re.I,
        ),
    ),
    ("other", "invalid", re.compile(r"invalid usage|ncclInvalidUsage|ncclInvalidArgument", re.I)),
    ("other", "cuda", re.compile(r"Cuda failure|unhandled cuda error|CUDA error", re.I)),
    (
        "other",
        "worker-exit",
        re.compile(r"failed \(exitcode: -?\d+\)|ChildFailedError|Worker group FAILED"),
    ),
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

FILE_TRANSPORTS: Final = {
    "p2p": "P2P",
    "shm": "SHM",
    "net_ib": "IB",
    "net_socket": "Socket",
    "nvls": "NVLS",
    "coll_net": "CollNet",
    "ib_plugin": "IB",
}
IB_STATUS_NAMES: Final = {
    4: "local protection error",
    5: "work request flushed",
    10: "remote access error",
    11: "remote operation error",
    12: "transport retry counter exceeded",
    13: "RNR retry counter exceeded",
}
