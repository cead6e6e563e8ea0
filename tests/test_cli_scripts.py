"""``disttrain run [OPTIONS] SCRIPT.py ARGS``: every rank runs the script as torchrun runs it.

The project below has the shapes of pytorch/examples' ``ddp-tutorial-series``
(``multinode.py`` importing its sibling ``datautils.py``, taking ``total_epochs
save_every [--batch_size N]``): a sibling module, a sibling package that
imports another sibling, ``__file__`` use, a data file and an unused module
(neither travels). It is run from another folder, as users do.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import cli
from jupyter_disttrain.local_modules import MAX_MODULE_BYTES
from jupyter_disttrain.payload import CaptureError, Script, build_script_payload

TRAIN = textwrap.dedent(
    """\
    import argparse
    import json
    import os
    import sys

    import torch.distributed as dist

    from datautils import MyTrainDataset
    from models import build


    def main():
        parser = argparse.ArgumentParser(description="simple distributed training job")
        parser.add_argument("total_epochs", type=int)
        parser.add_argument("save_every", type=int)
        parser.add_argument("--batch_size", default=32, type=int)
        parser.add_argument("--fail-rank", type=int, default=-1)
        args = parser.parse_args()
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "datautils.py")) as fh:
            beside_me = "class MyTrainDataset" in fh.read()
        with open(f"written-by-rank-{rank}.txt", "w") as fh:
            fh.write("x")
        facts = {
            "rank": rank, "argv": sys.argv, "file": __file__, "name": __name__,
            "path0": sys.path[0], "cwd": os.getcwd(), "args": vars(args),
            "cwd_on_path": os.getcwd() in sys.path,
            "data": len(MyTrainDataset(args.batch_size)), "model": build(),
            "beside_me": beside_me, "wrote": os.path.exists(f"written-by-rank-{rank}.txt"),
            "folder": sorted(n for n in os.listdir(here) if n.endswith((".py", ".csv")) or
                             os.path.isdir(os.path.join(here, n)) and n != "__pycache__"),
        }
        print("FACTS " + json.dumps(facts), flush=True)
        if rank == args.fail_rank:
            raise RuntimeError(f"failing on rank {rank}")
        dist.barrier()
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """
)
FAIL_LINE = TRAIN.splitlines().index('        raise RuntimeError(f"failing on rank {rank}")') + 1

PROJECT = {
    "train.py": TRAIN,
    "datautils.py": "class MyTrainDataset:\n    def __init__(self, size):\n"
    "        self.size = size\n\n    def __len__(self):\n        return self.size\n",
    "models/__init__.py": "from .net import build\n",
    "models/net.py": "import helpers\n\n\ndef build():\n    return helpers.NAME\n",
    "helpers.py": "NAME = 'tiny-net'\n",
    "unused.py": "raise SystemExit('never imported')\n",
    "notes.csv": "a,b\n1,2\n",
}
#: What travels: the script, the modules it imports, transitively; no data, nothing unused.
SHIPPED = ["datautils.py", "helpers.py", "models/__init__.py", "models/net.py", "train.py"]


def make_project(root: Path) -> tuple[Path, Path]:
    """``root/proj`` (the script's folder) and ``root/elsewhere`` (where commands run)."""
    proj = root / "proj"
    for name, text in PROJECT.items():
        (proj / name).parent.mkdir(parents=True, exist_ok=True)
        (proj / name).write_text(text)
    (root / "elsewhere").mkdir()
    return proj, root / "elsewhere"


def facts(output: str) -> dict[int, dict[str, Any]]:
    """Each rank's ``FACTS`` record (with or without the ``[rank R]`` prefix).

    Read record by record, not line by line: under torchrun the ranks share one
    unbuffered stdout, where one rank's record may follow another's before its newline.
    """
    out = {}
    decoder = json.JSONDecoder()
    for piece in output.split("FACTS ")[1:]:
        found, _ = decoder.raw_decode(piece)
        out[found["rank"]] = found
    return out


def disttrain(cwd: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def disttrain_here(
    cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> subprocess.CompletedProcess[str]:
    """``disttrain ARGS`` run in ``cwd`` in this process, as ``python -m jupyter_disttrain.cli``
    runs it (its status, stdout, stderr): for commands that start no job."""
    monkeypatch.chdir(cwd)
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["disttrain", *args], code, out, err)


# --- arguments, payload, dry run (no processes) ----------------------------------------------


def parse(*argv: str) -> Any:
    return cli.build_parser().parse_args(["run", *argv])


def test_arguments_after_the_script_are_the_scripts() -> None:
    args = parse("--nodes", "2", "--nproc", "2", "multinode.py", "2", "1", "--batch_size", "8")
    assert (args.nodes, args.nproc, args.script) == (2, 2, "multinode.py")
    assert args.script_args == ["2", "1", "--batch_size", "8"] and not args.module
    # The script's own options, even when disttrain has one of that name, are the script's.
    args = parse("--nproc", "2", "train.py", "--nodes", "5", "-h", "--name=x")
    assert (args.nodes, args.name, args.script_args) == (
        None,
        None,
        ["--nodes", "5", "-h", "--name=x"],
    )
    args = parse("--nodes", "2", "--", "train.py", "--lr", "1")  # `--` ends disttrain's options
    assert (args.nodes, args.script, args.script_args) == (2, "train.py", ["--lr", "1"])
    args = parse("-m", "pkg.train", "-m", "x")
    assert (args.module, args.script, args.script_args) == (True, "pkg.train", ["-m", "x"])
    assert parse("train.py").script_args == []


def test_a_missing_script_argument_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse("--nodes", "2")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("error: the following arguments are required: SCRIPT"), err


def test_dry_run_lists_the_modules_that_travel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, elsewhere = make_project(tmp_path)
    argv = ["run", "--nodes", "2", "--nproc", "2", "--dry-run", "../proj/train.py", "2", "1"]
    done = disttrain_here(elsewhere, monkeypatch, capsys, *argv, "--batch_size", "4")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^job train-[0-9a-f]{4}: ", done.stdout, re.M), done.stdout  # its stem
    line = next(x for x in done.stdout.splitlines() if x.startswith("payload:"))
    assert "script ../proj/train.py 2 1 --batch_size 4 (" in line
    sizes = {n: len(PROJECT[n]) for n in PROJECT}
    pkg = sizes["models/__init__.py"] + sizes["models/net.py"]
    assert (
        f"ships datautils (local module, {sizes['datautils.py']} B), helpers (local module, "
        f"{sizes['helpers.py']} B), models (local module, {pkg} B); payload" in line
    ), line
    assert "unused" not in line and "notes" not in line
    # Arguments meant for disttrain but written after the script go to it; the note says so.
    late = disttrain_here(
        elsewhere,
        monkeypatch,
        capsys,
        "run",
        "--dry-run",
        "../proj/train.py",
        "2",
        "1",
        "--nodes",
        "2",
    )
    assert late.returncode == 0, late.stderr
    assert "note: --nodes after ../proj/train.py go to the script" in late.stderr
    assert "1 node(s) x 1 process(es)" in late.stdout


def test_the_payload_carries_argv_files_and_packages(tmp_path: Path) -> None:
    proj, elsewhere = make_project(tmp_path)
    script = Script("../proj/train.py", ("2", "1"), cwd=str(elsewhere))
    payload = build_script_payload(script, job="j")
    envelope = pickle.loads(payload.data)
    run = envelope["script"]
    assert run["argv"] == ["../proj/train.py", "2", "1"] and run["module"] is None
    assert run["file"] == f"{elsewhere}/../proj/train.py" and run["root"] == os.path.realpath(proj)
    assert sorted(run["files"]) == SHIPPED and run["name"] == "train.py"
    assert run["files"]["train.py"] == TRAIN.encode()
    assert envelope["modules"] == {} and envelope["source"] == TRAIN
    assert set(envelope["packages"]) == {"torch"}  # the pre-flight's: installed, not local
    assert payload.script is not None and payload.script.command == ("../proj/train.py", "2", "1")


def test_bad_scripts_are_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    proj, elsewhere = make_project(tmp_path)
    missing = disttrain_here(elsewhere, monkeypatch, capsys, "run", "nope.py", "1")
    assert missing.returncode == 2
    assert "disttrain: cannot read nope.py: No such file or directory" in missing.stderr
    (proj / "broken.py").write_text("import os\nx = (\n")
    broken = disttrain_here(elsewhere, monkeypatch, capsys, "render", "../proj/broken.py")
    assert broken.returncode == 2 and "../proj/broken.py has a syntax error on line 2" in (
        broken.stderr
    )
    module = disttrain_here(elsewhere, monkeypatch, capsys, "run", "-m", "proj.nothing")
    assert module.returncode == 2 and "no module named 'proj.nothing' here" in module.stderr
    (proj / "huge.py").write_text("X = '" + "a" * (MAX_MODULE_BYTES + 10) + "'\n")
    (proj / "big.py").write_text("import huge\n")
    with pytest.raises(CaptureError, match=r"'huge' .* too big to travel with the script"):
        build_script_payload(Script(str(proj / "big.py")), job="j")


def test_a_module_is_found_from_the_current_folder(tmp_path: Path) -> None:
    proj, _ = make_project(tmp_path)
    (proj / "__main__.py").write_text("from . import helpers\n")
    (proj / "sub").mkdir()
    (proj / "sub" / "go.py").write_text("from datautils import MyTrainDataset\n")
    one = pickle.loads(
        build_script_payload(Script("proj", module=True, cwd=str(tmp_path)), job="j").data
    )["script"]
    assert one["name"] == "proj/__main__.py" and one["module"] == "proj"
    assert one["file"] == str(proj / "__main__.py") and one["root"] == str(tmp_path)
    assert "proj/sub/go.py" in one["files"] and "proj/train.py" in one["files"]
    # An installed module travels by name; the workers' pre-flight checks they have it.
    env = pickle.loads(
        build_script_payload(
            Script("torch.utils.collect_env", module=True, cwd=str(tmp_path)), job="j"
        ).data
    )
    assert env["script"]["files"] == {} and env["script"]["name"] == ""
    assert "torch" in env["packages"]


# --- real runs ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_script_runs_in_every_rank_as_under_torchrun(tmp_path: Path) -> None:
    """The same script and arguments, under torchrun and under disttrain (fork, exec)."""
    proj, elsewhere = make_project(tmp_path)
    args = ["../proj/train.py", "2", "1", "--batch_size", "4"]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    torchrun = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            *args,
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert torchrun.returncode == 0, torchrun.stderr
    expected = facts(torchrun.stdout)[1]
    assert expected["argv"] == args and expected["file"] == f"{elsewhere}/../proj/train.py"
    assert expected["cwd"] == str(elsewhere) and expected["path0"] == os.path.realpath(proj)
    assert not expected["cwd_on_path"]  # the launcher's folder is not the script's
    for name in list(elsewhere.iterdir()):
        name.unlink()
    # Options first, then the script and its arguments; also with `--` before the script.
    done = disttrain(elsewhere, "run", "--nodes", "2", "--nproc", "2", "--", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    got = facts(done.stdout)
    assert sorted(got) == [0, 1, 2, 3], done.stdout
    for rank, found in got.items():
        assert {**found, "rank": 1} == expected, (rank, found, expected)
    assert found["model"] == "tiny-net" and found["data"] == 4 and found["beside_me"]
    assert found["folder"] == [
        "datautils.py",
        "helpers.py",
        "models",
        "notes.csv",
        "train.py",
        "unused.py",
    ]  # the real folder: it runs in place
    assert sorted(p.name for p in elsewhere.iterdir()) == [
        f"written-by-rank-{r}.txt" for r in range(4)
    ]
    assert "job Succeeded" in done.stdout


@pytest.mark.slow
def test_a_rank_that_raises_names_the_scripts_line(tmp_path: Path) -> None:
    """Exec mode (fresh interpreters): rank 1 raises; the traceback is the script's own."""
    proj, elsewhere = make_project(tmp_path)
    done = disttrain(
        elsewhere,
        "run",
        "--launch",
        "exec",
        "--nproc",
        "2",
        "../proj/train.py",
        "3",
        "1",
        "--fail-rank",
        "1",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    got = facts(done.stdout)
    assert got[0]["argv"] == ["../proj/train.py", "3", "1", "--fail-rank", "1"]
    assert got[0]["args"] == {"total_epochs": 3, "save_every": 1, "batch_size": 32, "fail_rank": 1}
    assert got[1]["file"] == f"{elsewhere}/../proj/train.py" and got[1]["cwd"] == str(elsewhere)
    assert got[1]["path0"] == os.path.realpath(proj) and not got[1]["cwd_on_path"]
    trace = done.stderr.split("Remote traceback (rank 1):", 1)[1]
    assert trace.lstrip().startswith("Traceback (most recent call last):"), trace
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    assert frames == [
        f'File "{elsewhere}/../proj/train.py", line {len(TRAIN.splitlines())}, in <module>',
        f'File "{elsewhere}/../proj/train.py", line {FAIL_LINE}, in main',
    ], trace  # the runtime's frames that led there are left out, as python shows a script's
    assert 'raise RuntimeError(f"failing on rank {rank}")' in trace
    assert "RuntimeError: failing on rank 1" in trace


def all_ranks_said_once(said: str, words: str, world: int) -> bool:
    """``said`` reads "job Failed: all N ranks: WORDS", or names the ranks that got to
    ``words`` and says the rest stopped as a consequence (torchrun stops a node's other
    ranks once one exits, and a rank slow to start may not have reached its parser yet)."""
    if said == f"job Failed: all {world} ranks: {words}":
        return True
    match = re.fullmatch(
        rf"job Failed: ranks? [0-9, -]+: {re.escape(words)}; (\d+) ranks? stopped as a consequence",
        said,
    )
    return match is not None and 0 < int(match[1]) < world


def test_a_script_whose_arguments_are_missing_on_every_rank_says_the_parsers_words_once(
    tmp_path: Path,
) -> None:
    """Every rank's argparse exits 2: the job names the parser's error once, for all ranks
    (or for those that got there before torchrun stopped the others: a loaded machine)."""
    _proj, elsewhere = make_project(tmp_path)
    done = disttrain(elsewhere, "run", "--nodes", "2", "--nproc", "2", "../proj/train.py")
    logs = done.stdout + done.stderr
    assert done.returncode == 1, logs
    words = "train.py: error: the following arguments are required: total_epochs, save_every"
    failed = [line for line in logs.splitlines() if line.startswith("job Failed: ")]
    assert len(failed) == 1 and all_ranks_said_once(failed[0], words, 4), logs
    trace = done.stderr.split("Remote traceback", 1)[1]
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    assert frames and all("/proj/train.py" in frame for frame in frames), trace  # no argparse
    assert "parse_args" in trace, trace


@pytest.mark.slow
def test_python_dash_m_form(tmp_path: Path) -> None:
    """``disttrain run -m pkg.mod ARGS``: what ``python -m pkg.mod ARGS`` sees, in every rank."""
    pkg = tmp_path / "trainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "conf.py").write_text("VALUE = 42\n")
    (pkg / "run.py").write_text(
        textwrap.dedent(
            """\
        import json, os, sys
        from .conf import VALUE
        print("FACTS " + json.dumps({"rank": int(os.environ.get("RANK", 0)), "argv": sys.argv,
              "file": __file__, "name": __name__, "package": __package__,
              "path0": sys.path[0], "cwd": os.getcwd(), "value": VALUE}))
        sys.exit(0)
        """
        )
    )
    plain = subprocess.run(
        [sys.executable, "-m", "trainpkg.run", "--lr", "0.1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0, plain.stderr
    expected = facts(plain.stdout)[0]
    assert expected["argv"][0] == str(pkg / "run.py") and expected["package"] == "trainpkg"
    done = disttrain(tmp_path, "run", "--nproc", "2", "-m", "trainpkg.run", "--lr", "0.1")
    assert done.returncode == 0, done.stdout + done.stderr  # sys.exit(0) is success
    got = facts(done.stdout)
    assert {**got[1], "rank": 0} == got[0] == expected, (got, expected)
