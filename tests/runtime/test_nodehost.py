"""A local node's own host name: ``nodehost.py NAME ARGV`` runs ARGV under it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from jupyter_disttrain.runtime import nodehost

UNPRIVILEGED = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
SAY = "import os, socket; print(socket.gethostname(), os.getpid())"


@pytest.mark.skipif(os.geteuid() != 0, reason="a UTS namespace needs root")
def test_the_command_runs_under_the_name_in_the_same_process() -> None:
    before = socket.gethostname()
    proc = subprocess.Popen(
        [sys.executable, "-I", nodehost.__file__, "job-node-1", sys.executable, "-c", SAY],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.split() == ["job-node-1", str(proc.pid)]  # exec: the pid its owner started
    assert socket.gethostname() == before  # this host keeps its name


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to an unprivileged user")
def test_without_the_privilege_it_says_which_name_it_could_not_give() -> None:
    done = subprocess.run(
        [*UNPRIVILEGED, sys.executable, "-I", nodehost.__file__, "job-node-1", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "cannot name this node's host 'job-node-1': Operation not permitted" in done.stderr
