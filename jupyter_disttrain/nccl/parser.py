"""NcclParser: reads communication lines one at a time and keeps what the summary needs."""

from __future__ import annotations

from .patterns import (
    BENIGN_WARN,
    BOOTSTRAP,
    BYTES,
    COMM,
    EXPLICIT,
    FILE_TRANSPORTS,
    GLOG,
    GLOO_PEERS,
    GLOO_RANK,
    HEADER,
    IB_DEV,
    INIT_STARTED,
    MAX_IFACES,
    MAX_PROBLEM_LINES,
    MAX_TEXT,
    NNODES,
    NVLS_CHANNELS,
    OOB_ADDR,
    OPTYPE,
    PG_SIZE,
    PROBLEM,
    RANK_PREFIX,
    RANK_TAG,
    RING,
    ROOT_CAUSE_ORDER,
    ROOT_CAUSES,
    RULES,
    SEQ,
    SETTING,
    SOCKET_IF,
    TIMEOUT_MS,
    TRACE,
    TRANSPORT_FILE,
    USING_NET,
    VERSION,
    VIA,
    Source,
)
from .summary import (
    Finding,
    Lines,
    NcclSummary,
    add_bounded,
    relevant,
)
from .text import (
    connection_text,
    hint_text,
    ib_text,
    net_name,
    oom_text,
    other_text,
    ranks_text,
    sentence,
    size_text,
    strip_rank_prefix,
    timeout_text,
)


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
        self._raw = Lines()
        self._comm = Lines()
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
        self._hints: dict[str, tuple[str, str]] = {}  # network -> (interface, address)
        self._no_rdma: str | None = None
        self._ib_disabled = False
        self._init_done: set[Source] = set()
        self._init_failed: set[Source] = set()
        self._bootstrap_failed = False
        self._found: dict[tuple[str | None, str], Finding] = {}
        self._class_sources: dict[str | None, set[Source]] = {}
        self._watchdog: dict[Source, tuple[str | None, str | None, int | None]] = {}
        self._pending_last_error: set[Source | None] = set()
        self._problems: list[str] = []  # lines that say something failed, in words no rule knows
        self._init_started = False
        self._from_info: set[tuple[str | None, str]] = set()  # findings read from INFO lines

    # -- feeding -----------------------------------------------------------

    def feed(self, line: str, rank: int | None = None) -> None:
        """Take one log line (with or without its line ending)."""
        if self._pending_last_error:
            waiting = rank if rank is not None else self._torch_rank(line)
            if waiting in self._pending_last_error:
                # The line after PyTorch's "Last error:" is NCCL's own message.
                self._pending_last_error.discard(waiting)
                self._raw.add(line.rstrip("\r\n"))
                self._classify(strip_rank_prefix(line), waiting, None, None)
                return
        if not relevant(line):
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

        header = HEADER.search(text) if is_nccl else None
        host = dev = proc = None
        if header is not None:
            host, dev = header.group(1), header.group(3)
            proc = f"{host}:{header.group(2)}"
            add_bounded(self._hosts, host)
        src: Source | None
        if rank is not None:
            src = rank
            if proc is not None:
                self._proc_rank.pop(proc, None)
                add_bounded(self._proc_rank, proc, (EXPLICIT, rank))
        elif proc is not None:
            src = proc
        else:
            src = self._torch_rank(text)
        if isinstance(src, int):
            add_bounded(self._ranks, src)

        if "NCCL version" in text and self._version is None:
            version = VERSION.search(text)
            if version is not None:
                self._version = version.group(1)
        if "NCCL WARN" in text:
            self._warnings += 1
            message = text[text.index("NCCL WARN") + 10 :].strip()
            if self._first_warning is None:
                self._first_warning = message[:MAX_TEXT]
            if self._first_error_warning is None and not BENIGN_WARN.search(message):
                self._first_error_warning = message[:MAX_TEXT]
            self._classify(message, src, host, dev)
        elif "NCCL INFO" in text:
            message = text[text.index("NCCL INFO") + 10 :].strip()
            if not BENIGN_WARN.search(message) and not SETTING.search(message):
                self._classify(message, src, host, dev, known_only=True)
        elif header is None:
            level = GLOG.search(text)
            if level is None or level.group(1) in "EF":
                self._classify(strip_rank_prefix(text), src, host, dev)
        if "Last error:" in text:
            rest = text[text.index("Last error:") + 11 :].strip()
            if not rest:
                add_bounded(self._pending_last_error, src)
        if is_nccl:
            self._parse_nccl(text, src, proc, host)
        elif "[Gloo]" in text:
            peers = GLOO_PEERS.search(text)
            if peers is not None:
                self._see_nranks(int(peers.group(2)) + 1)

    def _torch_rank(self, text: str) -> int | None:
        for pattern in (RANK_PREFIX, RANK_TAG, GLOO_RANK):
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
        if not self._init_started and INIT_STARTED.search(text):
            self._init_started = True
        if "anks " in text:
            comm = COMM.search(text)
            if comm is not None:
                comm_rank, size = int(comm.group(1)), int(comm.group(2))
                self._see_nranks(size)
                if proc is not None:
                    known = self._proc_rank.get(proc)
                    if known is None:
                        add_bounded(self._proc_rank, proc, (size, comm_rank))
                    elif size > known[0]:
                        self._proc_rank[proc] = (size, comm_rank)
                nodes = NNODES.search(text)
                if nodes is not None:
                    self._multi_node = int(nodes.group(1)) > 1 or bool(self._multi_node)
        if "global rank: " in text:
            pg = PG_SIZE.search(text)
            if pg is not None:
                self._see_nranks(int(pg.group(1)))
        if "Init COMPLETE" in text and src is not None:
            add_bounded(self._init_done, src)
        if " -> " in text:
            if ".c" in text:
                trace = TRACE.search(text)
                if trace is not None:
                    self._failed(None, "error", text.partition("NCCL INFO")[2] or text, src)
                    if trace.group(1) in ("init", "bootstrap") and src not in self._init_done:
                        add_bounded(self._init_failed, src if src is not None else "?")
                    if trace.group(1) == "bootstrap":
                        self._bootstrap_failed = True
            if " via " in text:
                via = VIA.search(text)
                if via is not None:
                    self._see_via(via.group(1), via.group(2), src)
                    if "GDRDMA" in text:
                        self._gdr = True
        elif ("Channel " in text or "Ring " in text) and " : " in text:
            ring = RING.search(text)
            if ring is not None:
                members = [int(n) for n in ring.group(1).split()]
                if sorted(members) == list(range(len(members))):
                    self._see_nranks(len(members))
        if ".c" in text:
            source_file = TRANSPORT_FILE.search(text)
            if source_file is not None:
                self._see_transport(FILE_TRANSPORTS[source_file.group(1) or "ib_plugin"], src)
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
            net = USING_NET.search(text)
            if net is not None:
                self._see_transport(net_name(net.group(1)), src)
        elif "NET/IB" in text:
            before_oob, _, oob = text.partition("OOB")
            devices = IB_DEV.findall(before_oob.partition("Using")[2])
            if devices:
                self._see_transport("IB", src)
            for device in devices:
                if len(self._ib_devs) < MAX_IFACES:
                    self._ib_devs.setdefault(device, None)
            oob_if = OOB_ADDR.search("OOB" + oob) if oob else None
            if oob_if is not None:
                self._see_iface(oob_if.group(1), oob_if.group(2), host)
        elif "NET/Socket" in text:
            found = False
            for iface, address in SOCKET_IF.findall(text.partition("Using")[2]):
                self._see_iface(iface, address, host)
                found = True
            if found:
                self._see_transport("Socket", src)
        elif "Bootstrap" in text:
            boot = BOOTSTRAP.search(text)
            if boot is not None:
                self._see_iface(boot.group(1), boot.group(2), host)

    def _parse_nvls(self, text: str, src: Source | None) -> None:
        if "NVLS multicast support is available" in text:
            if "transport disabled" not in text:
                self._see_transport("NVLS", src)
        elif "NVLS Head" in text or "Connected NVLS" in text:
            self._see_transport("NVLS", src)
        else:
            channels = NVLS_CHANNELS.search(text)
            if channels is not None and int(channels.group(1)) > 0:
                self._see_transport("NVLS", src)

    def _see_via(self, first: str, second: str | None, src: Source | None) -> None:
        if first == "NET" and second:
            self._see_transport(net_name(second), src)
        elif first in ("P2P", "SHM", "NVLS"):
            self._see_transport(first, src)
        elif first == "direct":  # NCCL < 2.7: "via direct shared memory"
            self._see_transport("SHM", src)
        elif first.lower() == "collnet":
            self._see_transport("CollNet", src)

    def _see_transport(self, name: str, src: Source | None) -> None:
        sources = self._transports.setdefault(name, set())
        if src is not None:
            add_bounded(sources, src)

    def _see_iface(self, iface: str, address: str, host: str | None) -> None:
        if len(self._net_ifaces) < MAX_IFACES:
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
                add_bounded(self._addr_host, address, host)
            elif owner != host:
                self._hints.setdefault("shared-address", (iface, address))

    def _classify(
        self,
        text: str,
        src: Source | None,
        host: str | None,
        dev: str | None,
        *,
        known_only: bool = False,
    ) -> None:
        """Find the rule a problem line matches; ``known_only``: informational lines."""
        for failure, cause, pattern in RULES:
            if known_only and failure not in ("connection", "timeout"):
                continue  # an INFO line is trusted for network trouble only
            if pattern.search(text):
                self._failed(failure, cause, text, src, host, dev, weak=known_only)
                if failure == "timeout":
                    self._see_timeout(cause, text, src)
                return
        if (
            not known_only
            and len(self._problems) < MAX_PROBLEM_LINES
            and PROBLEM.search(text)
            and not SETTING.search(text)
            and not BENIGN_WARN.search(text)
        ):
            self._problems.append(text.strip()[:MAX_TEXT])

    def _failed(
        self,
        failure: str | None,
        cause: str,
        text: str,
        src: Source | None,
        host: str | None = None,
        dev: str | None = None,
        *,
        weak: bool = False,
    ) -> None:
        key = (failure, cause)
        if key in self._from_info and not weak:  # a WARN or error line says it better
            del self._found[key]
            self._from_info.discard(key)
        if weak and key not in self._found:
            self._from_info.add(key)
        if failure == "cuda-oom":
            size = BYTES.search(text)
            if size is not None:
                self._oom_bytes = max(self._oom_bytes, int(size.group(1) or size.group(2)))
        if key not in self._found:
            self._found[key] = Finding(cause, text.strip()[:MAX_TEXT], src, host, dev)
        if src is not None:
            add_bounded(self._class_sources.setdefault(failure, set()), src)

    def _see_timeout(self, cause: str, text: str, src: Source | None) -> None:
        if cause != "watchdog" or src is None or "collective operation timeout" not in text:
            return
        seq, op, limit = SEQ.search(text), OPTYPE.search(text), TIMEOUT_MS.search(text)
        add_bounded(
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
        failure, finding = self._failure()
        if self._init_failed - self._init_done:
            init = False
        elif self._init_done:
            init = True
        elif self._init_started and finding is not None:
            init = False  # initialisation started, and a failure came before Init COMPLETE
        return NcclSummary(
            nccl_version=self._version,
            transport=transport,
            interfaces=[*self._net_ifaces, *self._ib_devs],
            nranks=self._nranks,
            init_complete=init,
            warnings=self._warnings,
            failure=failure,
            diagnosis=sentence(self._diagnose(failure, finding, transport)),
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
        """The suspect network configuration, as (network, interface, address)."""
        multi_node = self._multi_node or len(self._hosts) > 1
        for network in ("link-local", "loopback", "shared-address", "docker"):
            if network not in self._hints:
                continue
            if network == "loopback" and self._multi_node is False:
                continue
            if network == "docker" and not multi_node:
                continue
            return (network, *self._hints[network])
        return None

    def _failure(self) -> tuple[str, Finding | None]:
        for root in ROOT_CAUSES:
            for rule_failure, cause, _ in RULES:
                if cause == root and (rule_failure, cause) in self._found:
                    return str(rule_failure), self._found[(rule_failure, cause)]
        for failure in ROOT_CAUSE_ORDER:
            for rule_failure, cause, _ in RULES:
                if rule_failure == failure and (failure, cause) in self._found:
                    return failure, self._found[(failure, cause)]
        if self._hint() is not None:
            return "other", None
        if (None, "error") in self._found:
            return "other", self._found[(None, "error")]
        if self._problems or self._first_error_warning is not None:
            lines = self._problems or [str(self._first_error_warning)]
            return "other", Finding("unrecognised", " | ".join(lines), None, None, None)
        return "none", None

    def _where(self, finding: Finding) -> str:
        rank = self._resolve(finding.source)
        if rank is not None:
            return f" on rank {rank}"
        if finding.host is not None:
            return f" on {finding.host} GPU {finding.dev}"
        return ""

    def _diagnose(
        self, failure: str, finding: Finding | None, transport: dict[str, list[int]]
    ) -> str:
        hint = self._hint()
        if failure == "none":
            return self._diagnose_healthy(transport)
        if hint is not None and (finding is None or failure in ("connection", "timeout")):
            cause, fix = hint_text(*hint)
            if failure == "timeout":
                cause = f"collectives timed out, and {cause}"
            return f"{cause}: {fix}"
        assert finding is not None
        where = self._where(finding)
        if failure == "cuda-oom":
            others = any(found not in (None, "cuda-oom") for found, _ in self._found)
            return oom_text(where, self._oom_bytes, others)
        if failure == "shm":
            size = size_text(finding.text)
            return (
                f"/dev/shm is too small for NCCL's shared-memory segments{where}"
                f"{f' ({size} each)' if size else ''}, as with a container's 64 MB default: "
                "mount a memory-backed emptyDir at /dev/shm (Kubernetes) or give the container "
                "--shm-size or --ipc=host"
            )
        if failure == "ib":
            return ib_text(finding, where)
        if failure == "connection":
            return connection_text(finding, where, self._bootstrap_failed)
        if failure == "timeout":
            return self._timeout_text(finding)
        return other_text(finding, where, self._first_error_warning)

    def _timeout_text(self, finding: Finding) -> str:
        reports = {self._resolve(s): v for s, v in self._watchdog.items()}
        others = [self._resolve(s) for s in self._class_sources.get("timeout", ())]
        return timeout_text(finding, reports, others, self._nranks)

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
            slow = ranks_text(transport["Socket"])
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
        if self._first_warning is not None:
            count = "1 warning" if self._warnings == 1 else f"{self._warnings} warnings"
            return (
                f"{version} set up{size}{over} with no errors, and {count} that did not stop "
                f"it ('{self._first_warning}'): read it, it may cost performance"
            )
        return f"{version} set up{size}{over} with no errors: nothing to fix"
