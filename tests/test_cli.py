"""The ``disttrain`` command over the same library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import jobdir
from tests.conftest import SHARED, assert_no_processes


def disttrain(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


@pytest.mark.slow
def test_run_logs_jobs_and_stop(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "for i in range(3):\n"
        "    report(step=i, loss=1.0 / (i + 1))\n"
        "print('rank', dist.get_rank(), 'of', dist.get_world_size())\n"
        "dist.get_world_size()\n"
    )
    done = disttrain("run", "--nodes", "2", "--nproc", "1", "--name", "cli-run", str(script))
    assert done.returncode == 0, done.stderr
    assert "[rank 1] rank 1 of 2" in done.stdout
    assert "result:" not in done.stdout  # a script's last expression is no result, as in python
    assert "job Succeeded" in done.stdout
    logs = disttrain("logs", "cli-run", "--rank", "1")
    assert logs.stdout.strip() == "rank 1 of 2"
    listing = disttrain("jobs")
    assert "cli-run" in listing.stdout and "Succeeded" in listing.stdout
    # A long job started by one command is stopped by another.
    script.write_text("import time\nreport(step=0, up=1)\ntime.sleep(300)\n")
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "run",
            "--nodes",
            "2",
            "--name",
            "cli-stop",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    directory = jobdir.job_dir("cli-stop")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = jobdir.read_state(directory) or {}
        if state.get("state") == "Running":
            break
        time.sleep(0.2)
    assert disttrain("stop", "cli-stop").stdout.strip() == "cli-stop: stopped"
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 1, (out, err)
    assert "was stopped" in err
    assert_no_processes(directory)
    assert (jobdir.read_state(directory) or {})["state"] == "Stopped"


def main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``disttrain ARGV`` in this process (as ``python -m jupyter_disttrain.cli`` runs it):
    its exit status, stdout and stderr. For commands that start no job."""
    from jupyter_disttrain import cli

    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_bad_input_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = main(["run", str(tmp_path / "nope.py")], capsys)
    assert code == 2 and "cannot read" in err, err
    script = tmp_path / "t.py"
    script.write_text("x = (\n")
    code, _, err = main(["run", str(script)], capsys)
    assert code == 2 and "syntax error on line 1" in err, err
    script.write_text("1\n")
    code, _, err = main(["run", "--nodes", "0", str(script)], capsys)
    assert code == 2 and "--nodes must be" in err, err
    code, _, err = main(["logs", "no-such-job"], capsys)
    assert code == 1 and "no local job named" in err, err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--timeout", "inf"], "argument --timeout: 'inf' is not a finite number of seconds"),
        (["--timeout", "1e400"], "argument --timeout: '1e400' is not a finite number of seconds"),
        (["--grace-period", "nan"], "argument --grace-period: 'nan' is not a finite number"),
        (["--name", "job\n"], r"disttrain: job name 'job\n' is not allowed"),
        (["--env", "K\n=1"], r"disttrain: --env key 'K\n' is not a valid environment variable"),
        (["--checkpoint-dir", ""], "disttrain: --checkpoint-dir is empty; give a path or a URL"),
    ],
)
def test_bad_job_options_exit_2_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    from jupyter_disttrain import cli

    script = tmp_path / "t.py"
    script.write_text("1\n")
    try:
        code = cli.main(["run", *argv, "--dry-run", str(script)])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and needle in err and not out, (out, err)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["logs", "x", "--tail", "-1"], "argument --tail: -1 is negative; give 0 or more"),
        (["logs", "x", "--rank", "one"], "argument --rank: 'one' is not a whole number"),
        (["where", "x", "--timeout", "inf"], "argument --timeout: 'inf' is not a finite number"),
    ],
)
def test_bad_command_options_are_argparse_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    from jupyter_disttrain import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and needle in capsys.readouterr().err


def test_nccl_summary_json(capsys: pytest.CaptureFixture[str]) -> None:
    log = SHARED / "nccl-logs" / "08-shm-dev-shm-extend-failed.log"
    code, out, err = main(["nccl", str(log), "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert list(summary) == [
        "nccl_version",
        "transport",
        "interfaces",
        "nranks",
        "init_complete",
        "warnings",
        "failure",
        "diagnosis",
    ]
    assert summary["failure"] == "shm" and "/dev/shm" in summary["diagnosis"]
    assert "shm" in main(["nccl", str(log)], capsys)[1]


@pytest.mark.slow
def test_an_odd_metric_does_not_stop_the_output_and_sys_exit_is_the_scripts_status(
    tmp_path: Path,
) -> None:
    """Two exec-mode jobs. The first: a metric line that is not a number does not stop
    the output, and ``sys.exit(0)`` is success and ends the script there. The second:
    ``sys.exit(message)`` fails the job with that message."""
    script = tmp_path / "odd.py"
    script.write_text(
        "import json, sys\n"
        "line = {'v': 1, 'kind': 'metric', 'rank': 0, 't': 1.0, 'step': 0,\n"
        "        'values': {'acc': 'high'}}\n"
        "print('##distrain ' + json.dumps(line), flush=True)\n"
        "report(step=10, loss=0.25)\n"
        "print('after the odd line')\n"
        "print('before')\n"
        "sys.exit(0)\n"
        "print('never printed')\n"
    )
    done = disttrain("run", "--name", "cli-odd-metric", "--launch", "exec", str(script))
    assert done.returncode == 0, done.stderr
    assert "[rank 0] after the odd line" in done.stdout, done.stdout
    assert "[rank 0] step 10: loss=0.25" in done.stdout, done.stdout
    assert "[rank 0] before" in done.stdout and "never printed" not in done.stdout, done.stdout
    assert "job Succeeded" in done.stdout, done.stdout
    script.write_text("import sys\nsys.exit('the data set is empty')\n")
    failed = disttrain("run", "--name", "cli-exit-msg", "--launch", "exec", str(script))
    assert failed.returncode == 1, failed.stdout
    assert "SystemExit: the data set is empty" in failed.stderr, failed.stderr
