"""The sinks are the service's: the ``disttrain`` command gets them as the magics do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_disttrain.tracking.tensorboard import run_dir
from tests.tracking.mlflow_server import free_port
from tests.tracking.test_tensorboard import scalars


@pytest.mark.slow
def test_the_command_writes_tensorboard_files_and_says_once_that_mlflow_is_down(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "for i in range(4):\n"
        "    report(step=i, loss=dist.get_rank() + i / 10)\n"
    )
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "run",
            "--nproc",
            "2",
            "--name",
            "cli-tracked",
            "--tensorboard",
            str(tmp_path / "tb"),
            "--mlflow",
            down,
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    warnings = [line for line in done.stdout.splitlines() if "MLflow" in line]
    assert warnings == [
        f"warning: MLflow at {down}: cannot reach the tracking server (Connection refused); "
        "start it or fix --mlflow; the job goes on without it"
    ], done.stdout
    for rank in (0, 1):  # written and closed before the command exited
        got = scalars(run_dir(tmp_path / "tb", "cli-tracked", rank), "loss")
        assert got == [(i, pytest.approx(rank + i / 10)) for i in range(4)], (got, done.stdout)
