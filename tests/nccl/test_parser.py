"""Tests of the NCCL / c10d / gloo log parser (jupyter_disttrain.nccl).

The shared samples in ``shared/nccl-logs`` are checked against the expected
readings in their ``INDEX.md``; small synthetic logs cover message families
the samples do not contain.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from jupyter_disttrain.nccl import (
    FAILURES,
    RAW_HEAD,
    RAW_TAIL,
    NcclParser,
    NcclSummary,
    format_summary,
    summarize,
    summary_to_json,
)
from tests.conftest import REPO

LOGS = REPO.parent / "shared" / "nccl-logs"

# INDEX.md says "mixed" and names the parts in a comment; these are those parts.
MIXED_PARTS: dict[str, set[str]] = {
    "04-ib-gdrdma-p2p-cumem.log": {"IB", "P2P"},
    "09-cuda-oom-p2p-setup.log": {"P2P", "Socket"},
    "12-hang-after-init-docker-socket.log": {"Socket", "SHM"},
    "14-socketstartconnect-abort-proxy.log": {"Socket", "SHM"},
    "15-collnet-warn-roce-gdrdma.log": {"IB", "P2P"},
}

# Where this parser reads a sample differently from INDEX.md, and why.
DISAGREEMENTS: dict[str, dict[str, Any]] = {
    # INDEX counts the proxy's control sockets (misc/socket.cc) as a Socket transport.
    # Those sockets exist whatever the transport (07 and 16 fail on the same kind of
    # socket and are read as transport "unknown"); the only data transport in the
    # excerpt is P2P (transport/p2p.cc).
    "09-cuda-oom-p2p-setup.log": {"transport": {"P2P"}},
    # INDEX says "timeout" from the reporter's words ("hang after init"); the excerpt
    # itself ends at Init COMPLETE with no timeout. What the lines do show is NCCL's
    # sockets on the Docker bridge (172.17.0.2) across two hosts: a misconfiguration.
    "12-hang-after-init-docker-socket.log": {"failure": "other"},
}

# Phrases the diagnosis must contain for each sample (the cause and the fix).
DIAGNOSIS_PHRASES: dict[str, tuple[str, ...]] = {
    "01-ib-roce-init-complete.log": ("RoCE", "no errors"),
    "02-socket-fallback-aws-no-ib.log": ("TCP sockets", "ens3", "NCCL_IB_DISABLE=0"),
    "03-socket-fallback-hpcx-plugin.log": ("TCP sockets", "eno3", "RDMA devices"),
    "04-ib-gdrdma-p2p-cumem.log": ("GPUDirect RDMA", "P2P", "no errors"),
    "05-nvls-h100-24ranks.log": ("NVLS", "24 ranks", "no errors"),
    "06-watchdog-reduce-scatter-timeout.log": (
        "_REDUCE_SCATTER_BASE",
        "SeqNum 7753",
        "600 s",
        "0, 2-4, 6",
        "not a desync",
        "slow rank",
    ),
    "07-connection-refused-bootstrap.log": ("10.38.10.112", "refused", "bootstrap", "rendezvous"),
    "08-shm-dev-shm-extend-failed.log": ("/dev/shm", "emptyDir", "--shm-size"),
    "09-cuda-oom-p2p-setup.log": ("out of GPU memory", "GPU 3", "6.0 MiB", "follow from it"),
    "10-ib-completion-error-vendor129.log": ("status=12", "retry", "vendor err 129", "fabric"),
    "11-ib-disabled-socket-lo.log": ("loopback", "127.0.0.1", "NCCL_SOCKET_IFNAME"),
    "12-hang-after-init-docker-socket.log": ("Docker bridge", "172.17.0.2", "--network=host"),
    "13-tf-ibext-ibv-create-qp.log": ("queue pairs", "ulimit -l", "container"),
    "14-socketstartconnect-abort-proxy.log": ("10.0.0.2", "NCCL_SOCKET_IFNAME"),
    # The reading stays "no errors"; with a WARN line it never says "nothing to fix".
    "15-collnet-warn-roce-gdrdma.log": ("RoCE", "GPUDirect RDMA", "CollNet", "read it"),
    "16-bootstrap-ipv6-linklocal-abort.log": ("link-local", "ib1", "NCCL_SOCKET_FAMILY=AF_INET"),
}


def _value(text: str) -> Any:
    text = text.split("#", 1)[0].strip()
    if text == "unknown":
        return None
    if text in ("yes", "no"):
        return text == "yes"
    if text.isdigit():
        return int(text)
    if text.startswith("[") and text.endswith("]"):
        return [item.strip() for item in text[1:-1].split(",") if item.strip()]
    return text


def read_index() -> dict[str, dict[str, Any]]:
    """INDEX.md as {file name: {field: expected value}} (None for "unknown")."""
    text = (LOGS / "INDEX.md").read_text(encoding="utf-8")
    entries: dict[str, dict[str, Any]] = {}
    for name, block in re.findall(r"^## (\S+\.log)\n.*?```yaml\n(.*?)```", text, re.S | re.M):
        fields = {}
        for row in block.splitlines():
            key, sep, rest = row.partition(":")
            if sep and key.strip() and not key.startswith(" "):
                fields[key.strip()] = _value(rest)
        entries[name] = fields
    return entries


INDEX = read_index() if (LOGS / "INDEX.md").exists() else {}
SAMPLES = sorted(INDEX)


def _summary_of(name: str) -> NcclSummary:
    with open(LOGS / name, encoding="utf-8") as fh:
        return summarize(fh)


def test_index_lists_every_sample() -> None:
    assert INDEX, f"no INDEX.md under {LOGS}"
    assert set(INDEX) == {p.name for p in LOGS.glob("*.log")}
    assert set(DIAGNOSIS_PHRASES) == set(INDEX)
    for fields in INDEX.values():
        assert {"transport", "interfaces", "nranks", "init_complete", "warnings", "failure"} <= set(
            fields
        )


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_matches_index(name: str) -> None:
    expected = {**INDEX[name], **DISAGREEMENTS.get(name, {})}
    s = _summary_of(name)

    assert s.nccl_version == expected.get("nccl_version")
    assert s.interfaces == (expected["interfaces"] or [])
    assert s.nranks == expected["nranks"]
    assert s.init_complete is expected["init_complete"]
    assert s.warnings == expected["warnings"]
    assert s.failure == expected["failure"]
    assert s.failure in FAILURES

    transport = expected["transport"]
    if isinstance(transport, set):
        assert set(s.transport) == transport
    elif transport is None:
        assert s.transport == {}
    elif transport == "mixed":
        assert set(s.transport) == MIXED_PARTS[name]
    else:
        assert set(s.transport) == {transport}


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_diagnosis(name: str) -> None:
    s = _summary_of(name)
    assert s.backend == "nccl"
    assert s.diagnosis.endswith(".") and not s.diagnosis[0].islower()
    for phrase in DIAGNOSIS_PHRASES[name]:
        assert phrase in s.diagnosis, (phrase, s.diagnosis)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_json_and_text(name: str) -> None:
    s = _summary_of(name)
    data = summary_to_json(s)
    assert list(data) == [
        "nccl_version",
        "transport",
        "interfaces",
        "nranks",
        "init_complete",
        "warnings",
        "failure",
        "diagnosis",
    ]
    assert json.loads(json.dumps(data)) == data
    text = format_summary(s)
    assert s.failure in text and s.diagnosis in text
    nccl = [line for line in (LOGS / name).read_text().splitlines() if "NCCL" in line]
    assert s.raw_lines == nccl


def test_sample_ranks_are_attributed() -> None:
    # comm lines map host:pid to a rank; watchdog lines carry [rankN]: / [Rank N].
    assert _summary_of("04-ib-gdrdma-p2p-cumem.log").transport == {"IB": [3], "P2P": [3]}
    assert _summary_of("06-watchdog-reduce-scatter-timeout.log").ranks == [0, 2, 3, 4, 6]
    assert _summary_of("12-hang-after-init-docker-socket.log").transport["SHM"] == [10, 11, 12, 13]


# --- synthetic logs -------------------------------------------------------------


def feed(lines: list[str], **kwargs: Any) -> NcclSummary:
    parser = NcclParser(**kwargs)
    for line in lines:
        parser.feed(line)
    return parser.summary()


def H(host: str = "node0", pid: int = 100, dev: int = 0) -> str:
    return f"{host}:{pid}:{pid + 7} [{dev}] NCCL"


def test_recent_init_format_and_per_rank_transports() -> None:
    parser = NcclParser()
    for rank in range(4):
        host = f"node{rank // 2}"
        parser.feed(f"{H(host, 10 + rank, rank % 2)} INFO NCCL version 2.21.5+cuda12.4", rank)
        net = "IB" if rank < 3 else "Socket"
        parser.feed(f"{H(host, 10 + rank, rank % 2)} INFO Using network {net}", rank)
        parser.feed(
            f"{H(host, 10 + rank, rank % 2)} INFO ncclCommInitRankConfig comm 0x55d rank {rank} "
            f"nranks 4 cudaDev {rank % 2} nvmlDev {rank % 2} busId 18000 commId 0xab - Init START",
            rank,
        )
        parser.feed(
            f"{H(host, 10 + rank, rank % 2)} INFO comm 0x55d rank {rank} nranks 4 cudaDev "
            f"{rank % 2} nvmlDev {rank % 2} busId 18000 commId 0xab - Init COMPLETE\r\n",
            rank,
        )
    s = parser.summary()
    assert s.nccl_version == "2.21.5+cuda12.4"
    assert s.transport == {"IB": [0, 1, 2], "Socket": [3]}
    assert (s.nranks, s.init_complete, s.failure) == (4, True, "none")
    assert s.ranks == [0, 1, 2, 3]
    assert "3 use TCP sockets while the others use IB" in s.diagnosis
    assert all(not line.endswith("\n") for line in s.raw_lines)


def test_rank_from_largest_communicator_and_channel_lines() -> None:
    s = feed(
        [
            f"{H('a', 5)} INFO comm 0x1 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0",
            f"{H('a', 5)} INFO comm 0x2 rank 6 nRanks 8 nNodes 2 localRanks 4 localRank 2 MNNVL 0",
            f"{H('a', 5)} INFO Channel 00/0 : 6[2] -> 7[3] via P2P/IPC/read",
            f"{H('a', 5)} INFO Channel 01/0 : 6[2] -> 2[2] [send] via NET/IBext_v8/0/GDRDMA",
            f"{H('a', 5)} INFO Channel 02/0 : 6[2] -> 5[1] via SHM/direct/direct",
            f"{H('a', 5)} INFO Channel 03/1 : 6[2] -> 7[3] via NVLS",
        ]
    )
    assert s.nranks == 8
    assert s.transport == {"P2P": [6], "IB": [6], "SHM": [6], "NVLS": [6]}


def test_given_rank_wins_over_the_line() -> None:
    parser = NcclParser()
    parser.feed(f"{H()} INFO Using network Socket", rank=5)
    parser.feed(f"{H()} INFO NET/Socket : Using [0]eth1:10.1.0.5<0> [1]eth2:10.2.0.5<0>")
    s = parser.summary()
    assert s.transport == {"Socket": [5]}
    assert s.interfaces == ["eth1", "eth2"]


def test_ring_listing_gives_nranks_only_when_complete() -> None:
    ring = f"{H()} INFO Channel 00/02 :    0   3   2   1"
    cut = f"{H()} INFO Channel 01/02 :    0   7   6   5   9"  # a line cut short
    assert feed([ring]).nranks == 4
    assert feed([cut]).nranks is None


def test_nvls_only_when_used() -> None:
    lines = [
        f"{H()} INFO NVLS multicast support is not available on dev 0",
        f"{H()} INFO 2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
        f"{H()} INFO NET/IB : No device found.",
        f"{H()} INFO P2P plugin IBext",
    ]
    assert feed(lines).transport == {}
    used = f"{H()} INFO 32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels"
    assert set(feed([used]).transport) == {"NVLS"}


def test_last_error_continuation_is_classified() -> None:
    s = feed(
        [
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
            "/opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2006, unhandled cuda "
            "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
            "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.",
            "[rank1]: Last error:",
            "[rank1]: Cuda failure 'out of memory'",
        ]
    )
    assert (s.nccl_version, s.failure, s.backend) == ("2.19.3", "cuda-oom", "nccl")
    assert "rank 1" in s.diagnosis
    assert "[rank1]: Cuda failure 'out of memory'" in s.raw_lines


def test_bootstrap_without_interface() -> None:
    s = feed(
        [
            f"{H()} INFO NCCL_SOCKET_IFNAME set by environment to eth9",
            f"{H()} bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found",
            f"{H()} INFO init.cc:82 -> 3",
        ]
    )
    assert (s.failure, s.init_complete, s.warnings) == ("connection", False, 1)
    assert "NCCL_SOCKET_IFNAME" in s.diagnosis


def test_recent_ib_completion_format() -> None:
    s = feed(
        [
            f"{H()} net_ib.cc:2330 NCCL WARN NET/IB: Got completion from peer 10.0.0.3<41234> "
            "with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 "
            "localGid ::ffff:10.0.0.2 remoteGids ::ffff:10.0.0.3 hca mlx5_0",
            f"{H()} INFO transport/net.cc:1302 -> 6",
        ]
    )
    assert (s.failure, set(s.transport)) == ("ib", {"IB"})
    assert "status=12" in s.diagnosis and "10.0.0.3:41234" in s.diagnosis


@pytest.mark.parametrize(
    ("warn", "phrase"),
    [
        ("Call to ibv_reg_mr failed with error Bad address", "nvidia-peermem"),
        ("Call to ibv_create_qp failed with error Cannot allocate memory", "ulimit -l"),
        ("Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1", "GID"),
        ("NET/IB : Got async event : port error", "ibstat"),
    ],
)
def test_ib_failures(warn: str, phrase: str) -> None:
    s = feed([f"{H()} ibvwrap.cc:123 NCCL WARN {warn}"])
    assert s.failure == "ib"
    assert phrase in s.diagnosis


def test_watchdog_desync_and_silent_ranks() -> None:
    def timeout(rank: int, seq: int, op: str) -> str:
        return (
            f"[rank{rank}]:[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] [PG ID 0 PG GUID "
            f"0(default_pg) Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
            f"ran for 1800081 milliseconds before timing out."
        )

    comm = [
        f"{H(pid=r)} INFO comm 0x1 rank {r} nranks 4 cudaDev 0 - Init COMPLETE" for r in range(4)
    ]
    same = feed([*comm, timeout(0, 9, "ALLREDUCE"), timeout(1, 9, "ALLREDUCE")])
    assert same.failure == "timeout"
    assert "1800 s" in same.diagnosis and "ranks 2-3 reported no timeout" in same.diagnosis
    desync = feed([timeout(0, 9, "ALLREDUCE"), timeout(1, 8, "BROADCAST")])
    assert desync.failure == "timeout"
    assert "desync" in desync.diagnosis and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in desync.diagnosis


def test_root_cause_wins_over_its_consequences() -> None:
    timeout = (
        "[rank0]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=600000) ran for "
        "600061 milliseconds before timing out."
    )
    closed = (
        f"{H()} misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer x<1>"
    )
    ib = f"{H()} NCCL WARN NET/IB : Got completion from peer 10.0.0.1<5> with status=12 opcode=0"
    oom = f"{H()} include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'"
    assert feed([timeout, closed]).failure == "connection"
    assert feed([timeout, closed, ib]).failure == "ib"
    assert feed([timeout, ib, oom]).failure == "cuda-oom"


@pytest.mark.parametrize(
    ("line", "failure", "phrase"),
    [
        (
            "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
            "1/2 clients joined.",
            "connection",
            "rendezvous",
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
            "message: address already in use",
            "connection",
            "MASTER_PORT",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
            "by peer [10.1.1.2]:23456",
            "connection",
            "10.1.1.2:23456",
        ),
        (
            "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
            "Timed out waiting 1800000ms for recv operation to complete",
            "timeout",
            "gloo",
        ),
        (
            "RuntimeError: [/pytorch/torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:2786] "
            "Ranks 2, 3 failed to pass monitoredBarrier in 30000 ms",
            "timeout",
            "anks 2, 3 never reached",
        ),
        (
            "[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Heartbeat monitor timed out! Process "
            "will be terminated after dumping debug info.",
            "timeout",
            "Xid",
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, "
            "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.18.1",
            "other",
            "invalid usage",
        ),
        (
            "ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely.",
            "connection",
            "another rank",
        ),
    ],
)
def test_pytorch_and_gloo_errors(line: str, failure: str, phrase: str) -> None:
    s = feed([line])
    assert s.failure == failure
    assert phrase in s.diagnosis


def test_duplicate_gpu() -> None:
    s = feed(
        [
            f"{H()} init.cc:1020 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on "
            "CUDA device 1000",
            f"{H()} INFO init.cc:1450 -> 5",
        ]
    )
    assert (s.failure, s.init_complete) == ("other", False)
    assert "set_device(local_rank)" in s.diagnosis


def test_unrecognised_nccl_failure_is_other_and_quotes_the_warning() -> None:
    s = feed(
        [
            f"{H()} graph/tuning.cc:187 NCCL WARN CollNet is not supported, ignoring NCCL_ALGO",
            f"{H()} enqueue.cc:99 NCCL WARN Something unexpected happened",
            f"{H()} INFO enqueue.cc:100 -> 3",
        ]
    )
    assert s.failure == "other"
    assert "Something unexpected happened" in s.diagnosis and "NCCL_DEBUG=INFO" in s.diagnosis


def test_warning_level_c10d_lines_are_not_failures() -> None:
    s = feed(
        [
            "[W socket.cpp:697] [c10d] The client socket has failed to connect to "
            "[localhost]:29500 (errno: 99 - Cannot assign requested address).",
            "[W1206 18:44:12.7 socket.cpp:755] [c10d] The client socket has failed to connect "
            "to [node1]:29500 (errno: 111 - Connection refused).",
        ]
    )
    assert s.failure == "none"
    assert len(s.comm_lines) == 2 and s.raw_lines == []


def test_gloo_job() -> None:
    s = feed(
        [
            "step 1 loss=2.31",
            "[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks "
            "is : 3",
            "[I1206 socket.cpp:800] [c10d] The client socket has connected to [node0]:29500",
            "epoch done",
        ]
    )
    assert (s.backend, s.nranks, s.failure) == ("gloo", 4, "none")
    assert s.transport == {} and s.raw_lines == []
    assert len(s.comm_lines) == 2
    assert "gloo" in s.diagnosis
    assert s.ranks == [1]


def test_backend_given_by_caller() -> None:
    assert NcclParser(backend="gloo").summary().backend == "gloo"
    quiet = feed([])
    assert (quiet.backend, quiet.failure) == ("unknown", "none")
    assert "NCCL_DEBUG=INFO" in quiet.diagnosis


def test_loopback_is_fine_on_one_node() -> None:
    lines = [
        f"{H()} INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
        f"{H()} INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
    ]
    assert feed(lines).failure == "none"
    assert feed(lines[:1]).failure == "other"


def test_same_address_on_two_hosts() -> None:
    s = feed(
        [
            f"{H('a')} INFO Bootstrap : Using eth0:172.18.0.2<0>",
            f"{H('b')} INFO Bootstrap : Using eth0:172.18.0.2<0>",
        ]
    )
    assert s.failure == "other"
    assert "--network=host" in s.diagnosis


def test_ib_disabled_socket_fallback() -> None:
    s = feed(
        [
            f"{H()} INFO NCCL_IB_DISABLE set by environment to 1.",
            f"{H()} INFO NET/Socket : Using [0]ens5:10.0.3.4<0>",
            f"{H()} INFO Using network Socket",
        ]
    )
    assert s.failure == "none"
    assert "NCCL_IB_DISABLE=0" in s.diagnosis and "ens5" in s.diagnosis


def test_init_trace_after_init_complete_is_not_an_init_failure() -> None:
    s = feed(
        [
            f"{H()} INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
            f"{H()} INFO init.cc:2000 -> 6",
        ]
    )
    assert s.init_complete is True


def test_lines_are_bounded() -> None:
    parser = NcclParser()
    total = RAW_HEAD + RAW_TAIL + 1234
    for i in range(total):
        parser.feed(f"{H()} INFO line {i}")
        parser.feed(f"[c10d] line {i}")
    s = parser.summary()
    assert len(s.raw_lines) == RAW_HEAD + RAW_TAIL and s.raw_dropped == 1234
    assert s.raw_lines[0].endswith("line 0") and s.raw_lines[-1].endswith(f"line {total - 1}")
    assert len(s.comm_lines) == RAW_HEAD + RAW_TAIL and s.comm_dropped == 1234


def test_many_ranks_stay_bounded() -> None:
    parser = NcclParser()
    for pid in range(20_000):
        parser.feed(f"{H('h' + str(pid % 500), pid)} INFO Using network IB")
    s = parser.summary()
    assert set(s.transport) == {"IB"}
    assert len(parser._transports["IB"]) <= 4096


def test_unrelated_lines_are_ignored() -> None:
    s = feed(["Epoch 1: loss 0.3", "Traceback (most recent call last):", "CUDA out of memory"])
    assert s.raw_lines == [] and s.comm_lines == [] and s.failure == "none"


def test_format_summary_lines() -> None:
    s = feed([f"{H()} INFO Using network IB"], backend="nccl")
    text = format_summary(s)
    assert text.splitlines()[0].split() == ["backend", "nccl"]
    assert "transport  IB" in text and "failure    none" in text
