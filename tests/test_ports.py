"""Each test process's ports: its emulators' and its local jobs' never meet another's."""

from __future__ import annotations

import os

from jupyter_disttrain.backends.local import plan
from tests.ports import emulator_ports, job_ports, job_ports_setting, worker_slice


def test_four_workers_emulators_and_jobs_have_ports_no_other_has() -> None:
    low, _ = plan.ephemeral_range()
    parts = []
    for index in range(4):
        env = {"PYTEST_XDIST_WORKER": f"gw{index}", "PYTEST_XDIST_WORKER_COUNT": "4"}
        emulators, jobs = emulator_ports(env), job_ports(env)
        assert len(emulators) >= 1000 and len(jobs) >= 1000, (index, emulators, jobs)
        assert set(emulators) | set(jobs) == set(worker_slice(env))
        parts += [emulators, jobs]
    bounds = [bound for part in parts for bound in (part.start, part.stop)]
    assert bounds == sorted(bounds), parts  # in order, so none overlaps the next
    assert parts[0].start == plan.PORT_FLOOR and parts[-1].stop <= low


def test_this_process_local_jobs_listen_on_its_own_ports() -> None:
    """``tests/isolation.py`` gives this process's jobs (and its kernels' and CLIs') their
    part, as ``DISTRAIN_PORTS``, which the local backend reads."""
    assert os.environ[plan.ENV_PORTS] == job_ports_setting()
    assert plan.chosen_ports() == job_ports()
    assert all(port in job_ports() for port in plan.free_ports(8))
