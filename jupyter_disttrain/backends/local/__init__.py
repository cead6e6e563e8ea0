"""The local backend: N real torchrun node agents on this machine, over loopback.

``plan`` builds the launch plan, ``processes`` controls the process tree,
``tailer`` reads log files as events, ``run`` is a job's state machine (and
its replay for other processes), ``backend`` the :class:`LocalBackend`.
"""

from __future__ import annotations

from .backend import LocalBackend
from .plan import (
    LOOPBACK,
    POLL_SECONDS,
    LocalPlan,
    NodeLaunch,
    build_plan,
    free_port,
    free_ports,
)
from .processes import job_processes, terminate
from .run import LocalReplay, LocalRun, stop_job
from .tailer import LogTailer

__all__ = [
    "LOOPBACK",
    "POLL_SECONDS",
    "LocalBackend",
    "LocalPlan",
    "LocalReplay",
    "LocalRun",
    "LogTailer",
    "NodeLaunch",
    "build_plan",
    "free_port",
    "free_ports",
    "job_processes",
    "stop_job",
    "terminate",
]
