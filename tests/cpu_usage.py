"""Each test's CPU seconds, its processes' and all they started, when ``DISTRAIN_TEST_CPU``
names a file (``make test TEST_CPU=FILE``; ``scripts/test_cpu.py FILE`` reads it).

The machine runs the suite CPU-bound (four workers on two cores), so wall seconds
say little of what a test costs: a test that waits on a timeout takes wall time while the
others use the CPU. Each pytest process (each xdist worker) moves itself into a cgroup of
its own before its first test; everything it starts (kernels, launchers, agents, ranks,
the emulator's pods, the browser) is counted there, and the difference over one test is
that test's CPU. A launcher that lingers after its test is counted with the tests that
follow in that process.

Needs a writable cgroup hierarchy (root): cgroup v1's ``cpuacct`` or cgroup v2; without
one the run stops before its first test and says so. One JSON line per test: ``test``,
``cpu`` and ``wall`` seconds, ``run`` (the process's cgroup). Each process leaves its
cgroup when it ends and removes the empty ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ENV_OUT = "DISTRAIN_TEST_CPU"
#: The name of every cgroup made here begins with it.
PREFIX = "distrain-test-cpu-"
#: (hierarchy, the file that holds a cgroup's CPU time, its unit in seconds)
HIERARCHIES = (
    (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage", 1e-9),
    (Path("/sys/fs/cgroup/unified"), "cpu.stat", 1e-6),
    (Path("/sys/fs/cgroup"), "cpu.stat", 1e-6),
)


def own_group(usage: str) -> str:
    """This process's cgroup in the hierarchy that counts with ``usage`` ("/" at the root):
    a pytest run inside a metered test is metered inside that test's cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (usage == "cpu.stat" and controllers == "") or "cpuacct" in controllers.split(","):
            return path
    return "/"


class Meter:
    """A cgroup of this process's own, and the CPU seconds counted in it so far."""

    def __init__(self, group: Path, usage: str, unit: float) -> None:
        self.group, self.usage, self.unit = group, usage, unit

    @classmethod
    def join(cls, name: str) -> Meter | None:
        """This process in a new cgroup ``name`` (None where none can be made)."""
        for root, usage, unit in HIERARCHIES:
            group = root / own_group(usage).lstrip("/") / name
            try:
                group.mkdir(exist_ok=True)
                (group / "cgroup.procs").write_text(str(os.getpid()))
                meter = cls(group, usage, unit)
                meter.seconds()
            except OSError:
                with contextlib.suppress(OSError):
                    group.rmdir()  # made, but this process could not join it
                continue
            return meter
        return None

    def leave(self) -> None:
        """Move this process back to the cgroup it came from."""
        try:
            (self.group.parent / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            pass

    def seconds(self) -> float:
        """CPU seconds of every process in the cgroup, the ended ones too."""
        text = (self.group / self.usage).read_text()
        if self.usage == "cpu.stat":
            fields = dict(line.split() for line in text.splitlines())
            return int(fields["usage_usec"]) * self.unit
        return int(text) * self.unit


_meter: Meter | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Join a cgroup of this process's own when ``DISTRAIN_TEST_CPU`` asks for the figures."""
    global _meter
    if not os.environ.get(ENV_OUT):
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _meter = Meter.join(f"{PREFIX}{os.getpid()}-{worker}")
    if _meter is None:
        raise pytest.UsageError(
            f"{ENV_OUT} asks for each test's CPU, but no cgroup can be made here (cgroup v1's "
            "cpuacct or cgroup v2, writable: run as root), or unset it"
        )


def pytest_unconfigure() -> None:
    """Leave this process's cgroup; remove the empty ones of this run and earlier runs."""
    if _meter is not None:
        _meter.leave()
        outermost = not _meter.group.parent.name.startswith(PREFIX)
        sweep(_meter.group.parent, SWEEP_SECONDS if outermost else 0.0)


#: Seconds the outermost pytest process waits for what outlived the tests (a lingering
#: launcher) before it gives up removing the cgroups (a later run removes them).
SWEEP_SECONDS = 15.0


def sweep(root: Path, wait: float) -> None:
    """Remove the cgroups this plugin made under ``root`` once empty, the deepest first,
    trying for up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        left = []
        for group in sorted(root.rglob(f"{PREFIX}*"), key=lambda p: -len(p.parts)):
            try:
                group.rmdir()
            except OSError:
                left.append(group)
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.5)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Record the test's CPU and wall seconds (setup, call and teardown)."""
    if _meter is None:
        yield
        return
    cpu, wall = _meter.seconds(), time.monotonic()
    yield
    line = {
        "test": item.nodeid,
        "cpu": round(_meter.seconds() - cpu, 2),
        "wall": round(time.monotonic() - wall, 2),
        "run": _meter.group.name,
    }
    with Path(os.environ[ENV_OUT]).open("a") as out:
        out.write(json.dumps(line) + "\n")
