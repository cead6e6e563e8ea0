"""A rank's resource figures, sampled by a thread of its own and sent as ``resources`` lines.

Standard library only (NVML through ``pynvml``, from the optional
``nvidia-ml-py`` package, when it is installed and finds a GPU). About once
a second (``DISTRAIN_RESOURCES_INTERVAL`` seconds, 0 turns sampling off)
every rank writes one ``resources`` line:

- ``cpu_pct``: CPU time of this process (all its threads) over the last
  interval, in % of one core as ``top`` shows it (above 100 with threads);
- ``rss_bytes``: its resident memory (``/proc/self/statm``);
- ``mem_limit_bytes``: the cgroup memory limit it runs under (v2 ``memory.max``,
  else v1), when set;
- ``gpu_util_pct``, ``gpu_mem_bytes``: its GPU's utilisation, and the memory
  this process holds on it (the device's used memory when NVML cannot see
  the process, as in a container), when CUDA and NVML are there.

A field that cannot be read is left out (never sent as 0). Resource lines
are quiet: they are no sign of activity to the hang watch. In a job of more
than :data:`LINES_PER_SECOND` ranks the default interval grows with the world
size, so the whole job sends about that many a second (8,192 ranks: one sample
per rank every 16 s) and the relay and the notebook carry metrics first; an
interval set in ``DISTRAIN_RESOURCES_INTERVAL`` is kept as set. Processes the
rank starts itself (data loader workers) are not counted.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Final

from . import env, report

ENV_INTERVAL = "DISTRAIN_RESOURCES_INTERVAL"
DEFAULT_INTERVAL: Final = 1.0
CGROUP_ROOT: Final = "/sys/fs/cgroup"
#: cgroup v1 writes "no limit" as a number near 2**63.
V1_UNLIMITED: Final = 1 << 60

_sampler: _Sampler | None = None


#: Resource lines a second the whole job sends at most, with the default interval.
LINES_PER_SECOND: Final = 512


def interval(world: int = 1) -> float:
    """Seconds between two samples of a rank of a job of ``world`` ranks (0: no sampling):
    ``DISTRAIN_RESOURCES_INTERVAL`` when set, else :data:`DEFAULT_INTERVAL`, longer in a job
    of more than :data:`LINES_PER_SECOND` ranks."""
    default = DEFAULT_INTERVAL * max(1.0, world / LINES_PER_SECOND)
    return env.seconds(ENV_INTERVAL, default) if ENV_INTERVAL in os.environ else default


def rss_bytes(statm: str = "/proc/self/statm") -> int | None:
    """Resident memory of this process, or None where ``/proc`` is not there."""
    try:
        with open(statm, encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_limit(root: str = CGROUP_ROOT, cgroup: str = "/proc/self/cgroup") -> int | None:
    """The cgroup memory limit of this process, None when unlimited or unknown.

    cgroup v2: the smallest ``memory.max`` of the process's cgroup (``0::/path``
    in ``cgroup``, under ``root``) and its parents up to ``root`` (a container
    sees its own cgroup there). Without one, cgroup v1's
    ``memory/memory.limit_in_bytes`` under ``root`` (a container's own).
    """
    path = ""
    try:
        with open(cgroup, encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    path = line[3:].strip().strip("/")
    except OSError:
        pass
    limits = []
    parts = path.split("/") if path else []
    for depth in range(len(parts), -1, -1):
        try:
            name = os.path.join(root, *parts[:depth], "memory.max")
            with open(name, encoding="ascii") as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.isdigit():
            limits.append(int(value))
    if not limits:
        try:
            with open(os.path.join(root, "memory", "memory.limit_in_bytes"), encoding="ascii") as f:
                value = f.read().strip()
            if value.isdigit() and int(value) < V1_UNLIMITED:
                limits.append(int(value))
        except OSError:
            pass
    return min(limits) if limits else None


def gpu_device(local_rank: int, visible: str | None) -> int | str:
    """The NVML device of a rank: an index or a UUID (``GPU-...``/``MIG-...``).

    ``visible`` is ``CUDA_VISIBLE_DEVICES`` (NVML ignores it, CUDA does not):
    the rank's device is its ``local_rank``-th visible one.
    """
    entries = [e.strip() for e in (visible or "").split(",") if e.strip()]
    if not entries:
        return local_rank
    entry = entries[local_rank % len(entries)]
    return int(entry) if entry.isdigit() else entry


class Gpu:
    """NVML readings of one device; :attr:`handle` is None without NVML or a GPU."""

    def __init__(self, local_rank: int) -> None:
        self.nvml: Any = None
        self.handle: Any = None
        try:
            import pynvml  # the optional nvidia-ml-py package

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() < 1:
                return
            device = gpu_device(local_rank, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if isinstance(device, str):
                self.handle = pynvml.nvmlDeviceGetHandleByUUID(device)
            else:
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            self.nvml = pynvml
        except Exception:  # not installed, no driver, no such device: no GPU figures
            self.handle = None

    def sample(self) -> dict[str, Any]:
        """``gpu_util_pct`` and ``gpu_mem_bytes`` (empty without a GPU or when NVML fails)."""
        if self.handle is None:
            return {}
        nvml, out = self.nvml, {}
        try:
            out["gpu_util_pct"] = float(nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            mine = [
                p.usedGpuMemory
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
                if p.pid == os.getpid() and p.usedGpuMemory is not None
            ]
            used = mine[0] if mine else nvml.nvmlDeviceGetMemoryInfo(self.handle).used
            out["gpu_mem_bytes"] = int(used)
        except Exception:
            pass
        return out


class Sampler:
    """Takes samples; :meth:`sample` returns the fields of a ``resources`` line."""

    def __init__(self, local_rank: int = 0) -> None:
        self.gpu = Gpu(local_rank)
        self.limit = memory_limit()
        self.cpu = time.process_time()
        self.wall = time.monotonic()

    def sample(self) -> dict[str, Any]:
        """The figures since the previous sample (or since the sampler was made)."""
        cpu, wall = time.process_time(), time.monotonic()
        out: dict[str, Any] = {}
        if wall > self.wall:
            out["cpu_pct"] = round(100.0 * (cpu - self.cpu) / (wall - self.wall), 1)
        self.cpu, self.wall = cpu, wall
        rss = rss_bytes()
        if rss is not None:
            out["rss_bytes"] = rss
        if self.limit is not None:
            out["mem_limit_bytes"] = self.limit
        out.update(self.gpu.sample())
        return out


class _Sampler:
    def __init__(self, rank: int, local_rank: int, every: float) -> None:
        self.rank = rank
        self.every = every
        self.sampler = Sampler(local_rank)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="distrain-resources", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                report.emit_as(self.rank, "resources", **self.sampler.sample())
            except Exception:  # stdout went away at the end: nothing left to tell
                return


def start(rank: int, local_rank: int = 0, world: int = 1) -> None:
    """Start this rank's sampler thread (idempotent; off when the interval is 0)."""
    global _sampler
    every = interval(world)
    if _sampler is not None or not every:
        return
    _sampler = _Sampler(rank, local_rank, every)
    _sampler.thread.start()


def stop() -> None:
    """Stop the sampler (before the process writes its last lines)."""
    global _sampler
    if _sampler is None:
        return
    sampler, _sampler = _sampler, None
    sampler.stop.set()
    sampler.thread.join(timeout=2.0)
