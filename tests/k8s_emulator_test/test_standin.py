"""Hosted stand-in pods (tests/k8s_emulator/standin.py): the rendezvous line goes to the
stand-in only once every node's container has started, as a real job's rendezvous waits."""

from __future__ import annotations

import os

from tests.k8s_emulator.logs import ContainerLog
from tests.k8s_emulator.standin import HostedJob, nodes_of, runs_elsewhere


def test_rendezvous_waits_for_every_node() -> None:
    read_end, write_end = os.pipe()
    job = HostedJob("scale")
    job.attach(0, ContainerLog())
    with os.fdopen(read_end, "rb") as stand_in:
        job.hold(os.fdopen(write_end, "wb"), 3)
        job.attach(2, ContainerLog())
        os.set_blocking(read_end, False)
        assert stand_in.read() is None  # nothing yet: node 1 has not started
        job.attach(1, ContainerLog())
        os.set_blocking(read_end, True)
        assert stand_in.read() == b"rendezvous\n"  # said once, then the pipe closed


def test_lines_said_before_a_node_started_go_first_into_its_log() -> None:
    job = HostedJob("scale")
    job.lines(1, [b"early\n"])
    log = ContainerLog()
    job.attach(1, log)
    job.lines(1, [b"later\n"])
    assert [line for _, line in log.read(0)[0]] == [b"early\n", b"later\n"]


def test_node_count_from_the_pod_environment() -> None:
    assert nodes_of({"PET_NNODES": "1024"}) == 1024
    assert nodes_of({"PET_NNODES": "1:4"}) is None  # elastic: no fixed rendezvous size
    assert nodes_of({}) is None


def test_only_node_0_of_a_hosted_job_runs_a_process() -> None:
    assert not runs_elsewhere({"DISTRAIN_STANDIN_JOB": "scale", "PET_NODE_RANK": "0"})
    assert runs_elsewhere({"DISTRAIN_STANDIN_JOB": "scale", "PET_NODE_RANK": "5"})
    assert not runs_elsewhere({"PET_NODE_RANK": "5"})  # an ordinary pod
