"""The sentences of a diagnosis: cause and fix for each failure class."""

from __future__ import annotations

from collections.abc import Iterable

from ..logbuffer import format_ranks
from .patterns import (
    BARRIER,
    BYTES,
    C10D_PEER,
    IB_STATUS,
    IB_STATUS_NAMES,
    IB_VENDOR,
    NCCL_PEER,
    RANK_PREFIX,
)
from .summary import (
    Finding,
)


def net_name(name: str) -> str:
    """'IB', 'IBext', 'IBext_v8' -> 'IB'; 'Socket' -> 'Socket'; a plugin keeps its name."""
    if name.upper().startswith("IB"):
        return "IB"
    if name.lower() == "socket":
        return "Socket"
    return name


def strip_rank_prefix(text: str) -> str:
    found = RANK_PREFIX.match(text)
    return text[found.end() :].strip() if found else text.strip()


def ranks_text(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    return format_ranks(ranks).replace(",", ", ")


def size_text(text: str) -> str:
    found = BYTES.search(text)
    if found is None:
        return ""
    size = int(found.group(1) or found.group(2))
    return f"{size / 2**20:.1f} MiB"


def _peer(text: str) -> str:
    found = NCCL_PEER.search(text)
    if found is not None:
        return f"{found.group(1)}:{found.group(2)}"
    found = C10D_PEER.search(text)
    if found is not None:
        return f"{found.group(1) or found.group(3)}:{found.group(2) or found.group(4)}"
    return "the peer"


def hint_text(network: str, iface: str, address: str) -> tuple[str, str]:
    """(cause, fix) for a suspect network configuration."""
    if network == "link-local":
        return (
            f"NCCL's sockets use {iface}, which has only the IPv6 link-local address {address} "
            "that other nodes cannot connect to",
            "set NCCL_SOCKET_IFNAME to an interface with a routable IPv4 address, or "
            "NCCL_SOCKET_FAMILY=AF_INET",
        )
    if network == "loopback":
        return (
            f"NCCL's sockets are on the loopback interface ({iface}, {address}), which cannot "
            "reach other nodes",
            "for a multi-node job set NCCL_SOCKET_IFNAME to the routable interface "
            "(and NCCL_IB_DISABLE=0 if the nodes have RDMA)",
        )
    private = "private bridge networks" if network == "shared-address" else "the Docker bridge"
    return (
        f"NCCL's sockets use {iface} at {address} on {private}, which other hosts cannot reach "
        "through NAT",
        "run the containers with --network=host (and --ipc=host) or set NCCL_SOCKET_IFNAME "
        "to an interface the nodes share",
    )


def oom_text(where: str, size: int, consequences: bool) -> str:
    alloc = f" allocating {size / 2**20:.1f} MiB" if size else ""
    after = ", and the errors elsewhere follow from it" if consequences else ""
    return (
        f"NCCL ran out of GPU memory{where}{alloc} for its buffers{after}: create the process "
        "group and run a first collective before the model fills the GPU, or leave headroom "
        "(smaller batch, lower NCCL_BUFFSIZE)"
    )


def ib_text(finding: Finding, where: str) -> str:
    if finding.cause == "gid":
        return (
            f"NCCL found no usable RoCE GID{where} ({finding.text}): set NCCL_IB_GID_INDEX to "
            "the RoCE v2 GID of the interface's IPv4 address (show_gids), and check that the "
            "interface has that address inside the container"
        )
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
        status = IB_STATUS.search(finding.text)
        vendor = IB_VENDOR.search(finding.text)
        code = int(status.group(1)) if status else -1
        name = IB_STATUS_NAMES.get(code, "an error")
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


def connection_text(finding: Finding, where: str, bootstrap: bool) -> str:
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
    if finding.cause == "retries":
        return (
            f"a rank kept retrying to connect to {peer}{where}: nothing answered there yet (the "
            "peer has not started, or exited) or the address is not reachable from this node; "
            "check that the peer runs and that MASTER_ADDR / NCCL_SOCKET_IFNAME name an "
            "address every node can reach"
        )
    if finding.cause == "gloo-mesh":
        return (
            f"gloo could not connect every pair of ranks{where} (connectFullMesh): the ranks "
            "cannot reach each other's gloo ports on the chosen interface; set "
            "GLOO_SOCKET_IFNAME to the interface the nodes share and open the ports between them"
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


def other_text(finding: Finding, where: str, first_warning: str | None) -> str:
    if finding.cause == "dup-gpu":
        return (
            f"two ranks were given the same GPU{where}: call torch.cuda.set_device(local_rank) "
            "before init_process_group and check CUDA_VISIBLE_DEVICES and nproc_per_node"
        )
    if finding.cause == "duplicate-rank":
        return (
            f"a rank checked in twice{where} ({finding.text}): two workers were started with "
            "the same rank (the same --node-rank on two nodes, or an old worker still alive "
            "when its replacement joined); give each node its own rank and end old workers"
        )
    if finding.cause == "version":
        return (
            f"the ranks or their libraries disagree on versions{where} ({finding.text}): run "
            "the same torch / NCCL build on every node (one image) and do not mix a system "
            "NCCL or net plugin built for another version"
        )
    if finding.cause == "driver":
        return (
            f"the CUDA driver failed{where} ({finding.text}): check that the GPUs are visible "
            "in the container (nvidia-smi), that the driver is new enough for this CUDA "
            "build, and the node's health (Xid errors in dmesg)"
        )
    if finding.cause == "worker-exit":
        return (
            f"a worker process exited with an error{where} ({finding.text}): the cause is in "
            "that rank's own output above (its traceback); the launcher only reports the exit"
        )
    if finding.cause == "unrecognised":
        return (
            f"unrecognised problem: the log reports trouble this reading does not know "
            f"('{finding.text}'): read those lines and the first failing rank's log"
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


def timeout_text(
    finding: Finding,
    reports: dict[int | None, tuple[str | None, str | None, int | None]],
    others: list[int | None],
    nranks: int | None,
) -> str:
    """The reading of collective timeouts: which collective, which sequence number, which ranks.

    ``reports`` maps each reporting rank to its watchdog's (SeqNum, OpType,
    timeout ms); ``others`` are ranks with other timeout lines.
    """
    if finding.cause == "barrier":
        late = BARRIER.search(finding.text)
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
    ranks = sorted(r for r in reports if r is not None)
    ranks += sorted(r for r in others if r is not None and r not in reports)
    ops = {(seq, op) for seq, op, _ in reports.values()}
    limits = {limit for _, _, limit in reports.values() if limit}
    limit_text = f" after {max(limits) // 1000} s" if limits else ""
    who = f"ranks {ranks_text(ranks)}" if ranks else "the reporting ranks"
    silent = ""
    if nranks and ranks:
        missing = sorted(set(range(nranks)) - set(ranks))
        if missing and len(missing) < nranks:
            silent = f"; ranks {ranks_text(missing)} reported no timeout, look there first"
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


def sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")
