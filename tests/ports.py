"""The ports of one test process: a slice for its emulators' pods, another for its local jobs.

Standard library and the local plan only (the emulator and ``tests/isolation.py`` both read
it). Every test process picks ports below the kernel's ephemeral range, where only an
explicit bind takes one; under pytest-xdist each worker (``gw<N>`` of
``PYTEST_XDIST_WORKER_COUNT``) has a slice of its own, halved between the emulators' pods
and the local jobs (``DISTRAIN_PORTS``). No two of them ever pick the same port between
checking it is free and listening on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from jupyter_disttrain.backends.local.plan import PORT_FLOOR, ephemeral_range


def worker_slice(environ: Mapping[str, str] = os.environ) -> range:
    """This test process's ports: all of them below the ephemeral range, or its xdist
    worker's share of those."""
    low, _ = ephemeral_range()
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    count = max(int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1"), 1)
    index = int(worker[2:]) if worker[:2] == "gw" and worker[2:].isdigit() else 0
    span = (low - PORT_FLOOR) // count
    return range(PORT_FLOOR + index * span, PORT_FLOOR + (index + 1) * span)


def emulator_ports(environ: Mapping[str, str] = os.environ) -> range:
    """The first half of :func:`worker_slice`: the ports this process's emulators hand out."""
    ports = worker_slice(environ)
    return ports[: len(ports) // 2]


def job_ports(environ: Mapping[str, str] = os.environ) -> range:
    """The second half of :func:`worker_slice`: the ports this process's local jobs use."""
    ports = worker_slice(environ)
    return ports[len(ports) // 2 :]


def job_ports_setting(environ: Mapping[str, str] = os.environ) -> str:
    """:func:`job_ports` as the local backend's ``DISTRAIN_PORTS`` value, ``LOW-HIGH``."""
    ports = job_ports(environ)
    return f"{ports.start}-{ports.stop - 1}"
