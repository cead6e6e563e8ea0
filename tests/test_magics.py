"""The magics through a real in-process IPython shell."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import service as jobs


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.extension_manager.load_extension("jupyter_disttrain")
    yield ip


def cell(ip: InteractiveShell, line: str, body: str = "1") -> object:
    return ip.run_cell_magic("distrain", line, body)


BAD_LINES = [
    ("--nodes 0", "--nodes must be"),
    ("--nodes two", "invalid int value"),
    ("--nproc 0", "--nproc must be"),
    ("--frobnicate", "unrecognized arguments"),
    ("--backend mars", "unknown --backend 'mars'"),
    ("--name Bad_Name", "job name 'Bad_Name' is not allowed"),
    ("--env NOEQUALS", "has no '='"),
    ("--env 9X=1", "not a valid environment variable name"),
    ("--env RANK=2", "override a variable the launcher sets"),
    ("--timeout -5", "--timeout must be a positive"),
    ("--timeout soon", "'soon' is not a number of seconds"),
    ("--dist-backend mpi", "unknown --dist-backend 'mpi'"),
    ("--max-restarts -1", "--max-restarts must be at least 0"),
    ("--max-restarts 99999999999999999999", "--max-restarts must be from 0 to 1000.*crash-loop"),
    ("-o not-a-name", "not a valid Python variable name"),
    ('--mlflow "http://a b"', "is not a tracking URI"),
    ("stray", "unrecognized arguments"),
]


@pytest.mark.parametrize(("line", "needle"), BAD_LINES)
def test_bad_flags_are_usage_errors(shell: InteractiveShell, line: str, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        cell(shell, line)


BAD_CELLS = [
    ("", "cell body is empty"),
    ("# only a comment\n\n", "has no code"),
    ("def f(:\n    pass", "syntax error on line 1"),
    ("!nvidia-smi", "magics or shell commands"),
    ("%timeit 1", "magics or shell commands"),
    ("print(LOCK)", r"'LOCK' \(lock\) cannot be sent"),
    ("next(GEN)", r"'GEN' \(generator\) cannot be sent"),
]


@pytest.mark.parametrize(("body", "needle"), BAD_CELLS)
def test_bad_cells_are_usage_errors(shell: InteractiveShell, body: str, needle: str) -> None:
    shell.user_ns["LOCK"] = threading.Lock()
    shell.user_ns["GEN"] = (i for i in range(3))
    with pytest.raises(UsageError, match=needle):
        cell(shell, "--nodes 1", body)


def test_oversized_capture_is_refused(shell: InteractiveShell) -> None:
    shell.user_ns["BIG"] = bytes(2_000_000)
    shell.run_line_magic("distrain_config", "max_capture_mb=1")
    try:
        with pytest.raises(UsageError, match=r"over the 1.0 MB limit.*BIG"):
            cell(shell, "", "len(BIG)")
    finally:
        shell.run_line_magic("distrain_config", "max_capture_mb=64")


@pytest.mark.parametrize(
    ("magic", "line", "needle"),
    [
        ("distrain_config", "bogus=1", "KEY one of"),
        ("distrain_config", "nodes=abc", "not valid"),
        ("distrain_logs", "no-such-job", "no local job named 'no-such-job'"),
        ("distrain_stop", "no-such-job", "no local job named 'no-such-job'"),
        ("distrain_logs", "x --tail -1", "--tail must be 0 or more"),
        ("distrain_jobs", "extra", "takes no arguments"),
    ],
)
def test_bad_line_magics(shell: InteractiveShell, magic: str, line: str, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        shell.run_line_magic(magic, line)


BAD_INPUT = [
    ("--timeout inf", "argument --timeout: 'inf' is not a finite number of seconds"),
    ("--timeout 1e400", "argument --timeout: '1e400' is not a finite number of seconds"),
    ("--hang-after inf", "argument --hang-after: 'inf' is not a finite number"),
    ('--checkpoint-dir ""', "--checkpoint-dir is empty; give a path or a URL"),
    ("--checkpoint-dir ''", "--checkpoint-dir is empty; give a path or a URL"),
    ("--name 'job\n'", r"job name 'job\\n' is not allowed"),
    ("--env 'K\n=1'", r"--env key 'K\\n' is not a valid environment variable name"),
    ('--name "unclosed', "cannot read the options .*close the quote"),
]


@pytest.mark.parametrize(("line", "needle"), BAD_INPUT)
def test_bad_input_is_a_usage_error_naming_the_fix(
    shell: InteractiveShell, line: str, needle: str
) -> None:
    with pytest.raises(UsageError, match=needle):
        cell(shell, line + " --dry-run")


def test_a_malformed_distrain_ports_is_a_usage_error_naming_the_fix(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTRAIN_PORTS", "20000")
    with pytest.raises(UsageError, match=r"DISTRAIN_PORTS='20000' is not a range of ports.*"):
        cell(shell, "--nodes 2 --backend local --dry-run")


def test_quotes_group_words_and_are_removed(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spaced = tmp_path / "a b"
    cell(shell, f"--name quoted --env \"MSG=two words\" --checkpoint-dir '{spaced}' --dry-run")
    out = capsys.readouterr().out
    assert "MSG='two words'" in out and f"DISTRAIN_CHECKPOINT_DIR='{spaced}'" in out, out
    assert not spaced.exists()  # a dry run makes no folder


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("nodes=-3", r"nodes=-3 is out of range; give 1 to 1024, e.g. nodes=1"),
        ("nproc=0", r"nproc=0 is out of range; give 1 to 256"),
        ("max_capture_mb=inf", "max_capture_mb=inf: give a finite number between 0 and 65536"),
        ("max_capture_mb=-1", "max_capture_mb=-1 is out of range"),
        ("timeout=inf", "timeout=inf: give a finite number"),
        ("hang_after=nan", "hang_after=nan: give a finite number"),
        ("nodes=2 nproc=-1", "nproc=-1 is out of range"),
        ("live=sideways", "live: 'sideways' is not valid"),
    ],
)
def test_config_refuses_values_out_of_range(
    shell: InteractiveShell, line: str, needle: str
) -> None:
    magics = shell.magics_manager.registry["DistrainMagics"]
    with pytest.raises(UsageError, match=needle):
        shell.run_line_magic("distrain_config", line)
    assert (magics.nodes, magics.nproc, magics.max_capture_mb) == (1, 1, 64.0)  # all or nothing


def test_config_values_are_read_as_a_shell_does(shell: InteractiveShell) -> None:
    magics = shell.magics_manager.registry["DistrainMagics"]
    shell.run_line_magic("distrain_config", "tensorboard='/tmp/my runs'")
    try:
        assert magics.tensorboard == "/tmp/my runs"
        shell.run_line_magic("distrain_config", 'tensorboard=""')
        assert magics.tensorboard == ""  # empty: the default place, not a folder named ""
    finally:
        shell.run_line_magic("distrain_config", "tensorboard=")


def test_config_autolog_reaches_the_plan(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    magics = shell.magics_manager.registry["DistrainMagics"]
    with pytest.raises(UsageError, match=r"no integration for 'xgb'"):
        shell.run_line_magic("distrain_config", "autolog=hf,xgb")
    shell.run_line_magic("distrain_config", "autolog=0")
    try:
        assert magics.autolog == "off"
        cell(shell, "--name dry-off --dry-run", "x = 1")
        assert "DISTRAIN_AUTOLOG=off" in capsys.readouterr().out
        cell(shell, "--name dry-hf --autolog lightning,hf --dry-run", "x = 1")
        assert "DISTRAIN_AUTOLOG=hf,lightning" in capsys.readouterr().out
    finally:
        shell.run_line_magic("distrain_config", "autolog=all")
    cell(shell, "--name dry-all --dry-run", "x = 1")
    assert "DISTRAIN_AUTOLOG" not in capsys.readouterr().out
    with pytest.raises(UsageError, match="contradict"):
        cell(shell, "--name dry-both --autolog hf --no-autolog --dry-run", "x = 1")


def test_dry_run_prints_plan(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    assert cell(shell, "--nodes 2 --nproc 2 --name dry --env A=1 --dry-run", "x = 1") is None
    out = capsys.readouterr().out
    assert "2 node(s) x 2 process(es) = 4 rank(s)" in out
    assert out.count("torchrun --nnodes 2") == 2 and "A=1" in out
    assert "dry" not in [r.name for r in jobs.registered().values()]


def test_help_lists_every_option(shell: InteractiveShell) -> None:
    doc = shell.find_cell_magic("distrain").__doc__ or ""
    for flag in (
        "--nodes",
        "--nproc",
        "--backend",
        "--name",
        "--env",
        "--timeout",
        "--wait",
        "-o",
        "--dry-run",
        "--dist-backend",
        "--max-restarts",
    ):
        assert flag in doc, flag


def test_config_defaults_apply(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("distrain_config", "nodes=3 nproc=2")
    try:
        cell(shell, "--dry-run", "1")
        assert "3 node(s) x 2 process(es)" in capsys.readouterr().out
    finally:
        shell.run_line_magic("distrain_config", "nodes=1 nproc=1")
    shell.run_line_magic("distrain_config", "")
    assert "nodes = 1" in capsys.readouterr().out


def test_config_sets_tensorboard_and_mlflow_and_options_win(shell: InteractiveShell) -> None:
    from IPython.core import magic_arguments

    magics = shell.magics_manager.registry["DistrainMagics"]

    def spec_of(line: str) -> object:
        args = magic_arguments.parse_argstring(magics.distrain, line)
        return jobs.default_service().spec(args, magics._defaults())

    assert (spec_of("--name cfg").tensorboard, spec_of("--name cfg").mlflow) == (None, None)
    shell.run_line_magic("distrain_config", "mlflow=http://127.0.0.1:5000 tensorboard=/tmp/tb")
    try:
        spec = spec_of("--name cfg")
        assert (spec.tensorboard, spec.mlflow) == ("/tmp/tb", "http://127.0.0.1:5000")
        spec = spec_of("--name cfg --tensorboard off --mlflow sqlite:///runs.db")
        assert (spec.tensorboard, spec.mlflow) == ("off", "sqlite:///runs.db")
    finally:
        shell.run_line_magic("distrain_config", "mlflow= tensorboard=")
    assert spec_of("--name cfg").mlflow is None


@pytest.mark.slow
def test_wait_returns_result_and_background_returns_handle(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.user_ns["OFFSET"] = 10
    value = cell(
        shell,
        "--nodes 1 --nproc 2 --wait --name mg-wait -o handle",
        "import torch.distributed as dist\nreport(step=0, v=1.0)\ndist.get_world_size() + OFFSET",
    )
    assert value == 12
    handle = shell.user_ns["handle"]
    assert handle.status() == "Succeeded" and len(handle.metrics()) == 2
    echoed = cell(
        shell,
        "--nodes 2 --nproc 1 --name mg-bg",
        "import time, torch.distributed as dist\ntime.sleep(1)\ndist.get_rank()",
    )
    assert echoed is None  # the live view shows the job: no Out[n] frozen at its launch state
    job = shell.user_ns["_"]
    assert isinstance(job, jobs.Job) and job.status() in ("Pending", "Running")
    assert job.spec.name == "mg-bg"
    with pytest.raises(UsageError, match="still"):
        cell(shell, "--nodes 1 --name mg-bg", "1")
    assert job.result(timeout=60) == 0
    shell.run_line_magic("distrain_jobs", "")
    out = capsys.readouterr().out
    assert "mg-wait" in out and "mg-bg" in out and "Succeeded" in out
    shell.run_line_magic("distrain_logs", "mg-bg --rank 0")
    with pytest.raises(UsageError, match="no log for rank 7"):
        shell.run_line_magic("distrain_logs", "mg-bg --rank 7")


def test_framework_default_is_configurable(shell: InteractiveShell) -> None:
    shell.run_line_magic("distrain_config", "framework=tensorflow")
    try:
        with pytest.raises(UsageError, match="one process per worker"):
            cell(shell, "--nodes 2 --nproc 2 --dry-run", "1")
    finally:
        shell.run_line_magic("distrain_config", "framework=pytorch")
    with pytest.raises(UsageError, match="not valid"):
        shell.run_line_magic("distrain_config", "framework=mxnet")


SESSION_MISTAKES = [
    ("distrain_session", "", "the following arguments are required: action"),
    ("distrain_session", "begin s", "invalid choice: 'begin'"),
    ("distrain_session", "stop", "needs a session name"),
    ("distrain_session", "stop nosuch", "no session named 'nosuch'"),
    ("distrain_session", "list extra", "takes no name"),
    ("distrain_session", "stop s --nodes 2", "--nodes: only %distrain_session start"),
    ("distrain_session", "start s --name t", "--name is the session's name"),
    ("distrain_session", "start s --dry-run", "--dry-run and --export are for jobs"),
    ("distrain_session", "start s --max-restarts 2", "remove --max-restarts"),
    ("distrain_session", "start s --idle-timeout 0", "--idle-timeout must be a positive"),
    ("distrain_session", "start Bad_Name", "job name 'Bad_Name' is not allowed"),
]


@pytest.mark.parametrize(("magic", "line", "needle"), SESSION_MISTAKES)
def test_session_mistakes_are_usage_errors(
    shell: InteractiveShell, magic: str, line: str, needle: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(needle)):
        shell.run_line_magic(magic, line)


def test_session_cell_mistakes_are_usage_errors(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="no session named 'nosuch'"):
        cell(shell, "--session nosuch")
    with pytest.raises(UsageError, match="--nodes cannot be given with --session"):
        cell(shell, "--session nosuch --nodes 2")


@pytest.mark.slow
def test_session_magics_start_run_list_and_stop(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("distrain_session", "start mg-sess --nodes 1 --nproc 2")
    assert "mg-sess: ready" in capsys.readouterr().out
    try:
        shell.user_ns["SCALE"] = 3
        assert (
            cell(
                shell,
                "--session mg-sess",
                "import torch.distributed as dist\n"
                "w = dist.get_rank() * SCALE\nreport(step=0, w=w)",
            )
            is None
        )
        shell.user_ns["SCALE"] = 100  # shipped again: the ranks see the new value
        assert cell(shell, "--session mg-sess", "w + SCALE") == 100
        with pytest.raises(UsageError, match="distrain_session stop mg-sess"):
            shell.run_line_magic("distrain_session", "start mg-sess --nproc 2")
        shell.run_line_magic("distrain_session", "list")
        out = capsys.readouterr().out
        assert "mg-sess" in out and "1x2" in out and "idle" in out
        with pytest.raises(UsageError, match="-o stores a job's handle"):
            cell(shell, "--session mg-sess -o x", "1")
        shell.run_line_magic("distrain_session", "restart mg-sess")
        assert "restarted (every rank's state was lost)" in capsys.readouterr().out
        with pytest.raises(NameError, match="'w' is not defined"):
            cell(shell, "--session mg-sess", "w")
    finally:
        shell.run_line_magic("distrain_session", "stop mg-sess")
    assert "mg-sess: Succeeded" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no session named 'mg-sess'"):
        cell(shell, "--session mg-sess", "1")
