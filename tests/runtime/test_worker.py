from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.runtime.cell import run_cell
from jupyter_disttrain.runtime.worker import choose_backend, requested_backend
from tests.signing import parse


def test_run_cell_returns_last_expression() -> None:
    ns: dict[str, object] = {}
    assert run_cell("a = 2\nb = a * 3\nb + 1", ns) == 7
    assert ns["b"] == 6
    assert run_cell("c = 1", ns) is None
    assert run_cell("for i in range(2):\n    pass\ni", ns) == 1


def test_run_cell_traceback_shows_cell_source() -> None:
    import traceback

    with pytest.raises(ZeroDivisionError) as info:
        run_cell("x = 1\ny = x / 0\n", {})
    text = "".join(traceback.format_exception(info.value))
    assert "<distrain-cell>" in text and "y = x / 0" in text


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('dist.init_process_group("gloo")', "gloo"),
        ("torch.distributed.init_process_group(backend='nccl', rank=0)", "nccl"),
        ("init_process_group('cpu:gloo,cuda:nccl')", "cpu"),
        ("x = 1", None),
        ("init_process_group(b)", None),
    ],
)
def test_requested_backend(source: str, expected: str | None) -> None:
    assert requested_backend(source) == expected


def test_choose_backend_falls_back_without_cuda() -> None:
    assert choose_backend("auto", "", cuda=False) == ("gloo", None)
    assert choose_backend("auto", "", cuda=True) == ("nccl", None)
    backend, warning = choose_backend("nccl", "", cuda=False)
    assert backend == "gloo" and warning is not None and "--dist-backend gloo" in warning
    assert choose_backend("auto", 'dist.init_process_group("gloo")', cuda=True)[0] == "gloo"


BLOCKER = textwrap.dedent(
    """
    import sys, importlib.abc
    BLOCKED = ("IPython", "ipykernel", "ipywidgets", "plotly", "anywidget", "kubernetes",
               "jupyter_server", "traitlets", "fsspec", "yaml", "psutil", "nbformat",
               "jupyter_disttrain.job", "jupyter_disttrain.magics", "jupyter_disttrain.events",
               "jupyter_disttrain.payload", "jupyter_disttrain.backends",
               "jupyter_disttrain.monitor", "jupyter_disttrain.spec")
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.startswith(BLOCKED):
                raise ImportError(f"blocked in a stock image: {name}")
            return None
    sys.meta_path.insert(0, Block())
    from jupyter_disttrain.runtime import worker
    sys.exit(worker.main([sys.argv[1]]))
    """
)


def one_rank_env() -> dict[str, str]:
    """This process's environment for a worker that is the whole job: rank 0 of 1, its
    process group on a free loopback port."""
    from jupyter_disttrain.backends.local import free_port

    return {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "GLOO_SOCKET_IFNAME": "lo",
    }


def test_worker_runs_with_notebook_packages_blocked(tmp_path: Path) -> None:
    """The runtime needs only the standard library, torch and cloudpickle."""

    def helper(v: int) -> int:
        return v + 1

    cell = (
        "import torch.distributed as dist\n"
        "from jupyter_disttrain import report\n"
        "report(step=0, loss=torch.tensor(0.25))\n"
        "dist.init_process_group('gloo')  # pasted tutorial code: harmless\n"
        "dist.destroy_process_group()\n"
        "dist.barrier()\n"
        "helper(dist.get_world_size())\n"
    )
    import torch

    payload = build_payload(cell, {"helper": helper, "torch": torch}, job="iso")
    path = tmp_path / "payload.pkl"
    path.write_bytes(payload.data)
    env = one_rank_env()
    env.pop("DISTRAIN_LOG_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKER, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [parse(line, 0, nproc=1) for line in proc.stdout.splitlines()]
    kinds = [e.kind for e in events]
    assert kinds[0] == "hello" and "metric" in kinds and kinds[-1] == "done", kinds
    metric = next(e for e in events if e.kind == "metric")
    assert metric.get("values") == {"loss": 0.25}
    result = next(e for e in events if e.kind == "result")
    from jupyter_disttrain.results import decode_result

    assert decode_result(result.fields) == 2


def test_worker_reports_python_version_mismatch(tmp_path: Path) -> None:
    payload = build_payload(
        "1", {}, job="v", extra={"python": "2.7.18", "image_hint": "python:2.7 image"}
    )
    path = tmp_path / "payload.pkl"
    path.write_bytes(payload.data)
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.runtime.worker", str(path)],
        env={**os.environ, "RANK": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    error = next(parse(x, 0, nproc=1) for x in proc.stdout.splitlines() if "##distrain" in x)
    assert error.kind == "error"
    assert "Python 2.7.18" in error.get("message") and "python:2.7 image" in error.get("message")


def test_package_preflight_names_missing_packages_and_warns_on_other_versions() -> None:
    import importlib.metadata

    import pytest

    from jupyter_disttrain.runtime.worker import SetupError, check_packages

    numpy_version = importlib.metadata.version("numpy")
    same = {"packages": {"numpy": ["numpy", numpy_version]}}
    assert check_packages(same) == []
    other = {"packages": {"numpy": ["numpy", "0.0.1"]}}
    assert check_packages(other) == [f"numpy {numpy_version} here, 0.0.1 in the notebook"]
    missing = {"packages": {"einops_xyz": ["einops-xyz", "0.8.0"], "numpy": ["numpy", "1"]}}
    fix = r"does not have: einops-xyz==0\.8\.0; add --pip einops-xyz==0\.8\.0"
    with pytest.raises(SetupError, match=fix):
        check_packages(missing)


def test_the_payload_records_the_cells_third_party_packages() -> None:
    import importlib.metadata
    import pickle

    from jupyter_disttrain.payload import build_payload

    payload = build_payload("import numpy as np\nimport json\nnp.ones(1)", {}, job="pk")
    packages = pickle.loads(payload.data)["packages"]
    assert packages == {"numpy": ["numpy", importlib.metadata.version("numpy")]}


def run_one_rank(
    tmp_path: Path,
    source: str,
    values: dict[str, object],
    job: str,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``source`` as the one rank of job ``job`` logging into ``tmp_path``; its log as
    written (a ``\\r`` stays)."""
    path = tmp_path / "payload.pkl"
    path.write_bytes(build_payload(source, values, job=job).data)
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.runtime.worker", str(path)],
        env={**one_rank_env(), "DISTRAIN_LOG_DIR": str(tmp_path), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (tmp_path / "rank-0.log").read_bytes().decode()
    assert proc.returncode == 0, proc.stdout + proc.stderr + log[-4000:]
    return log


FLUSHES_PART_OF_A_LINE = textwrap.dedent(
    """
    import sys
    from jupyter_disttrain import report
    for step in range(3):
        print(f"epoch {step}: ", end="", flush=True)
        report(step=step, x=1.0)
        print("done")
        sys.stderr.write(f"\\r{step + 1}/3 |###")  # a progress bar's redraw
        sys.stderr.flush()
        report(step=step, y=2.0)
    print()
    """
)


def test_a_line_the_cell_flushed_unended_keeps_its_text_when_a_report_follows(
    tmp_path: Path,
) -> None:
    """A fragment flushed without its newline (``end=""``, a bar's ``\\r`` redraw) is
    ended before the next protocol line: its text is read back, no report is lost."""
    log = run_one_rank(tmp_path, FLUSHES_PART_OF_A_LINE, {}, "fragments")
    events = [parse(text, 0, nproc=1) for text in log.split("\n")]
    texts = [e.get("text") for e in events if e.kind == "log" and e.get("text")]
    expected = []
    for step in range(3):
        expected += [f"epoch {step}: ", "done", f"\r{step + 1}/3 |###"]
    assert [t for t in texts if not t.startswith("distrain")] == expected, log
    metrics = [(e.get("step"), sorted(e.get("values") or {})) for e in events if e.kind == "metric"]
    assert metrics == [(s, [k]) for s in range(3) for k in ("x", "y")], log


PRINTS_WHILE_A_THREAD_REPORTS = textwrap.dedent(
    """
    import sys, threading
    from jupyter_disttrain import report
    done = threading.Event()
    def reporter():
        step = 0
        while not done.is_set():
            report(step=step, x=1.0)
            step += 1
    thread = threading.Thread(target=reporter)
    thread.start()
    for i in range(LINES):
        print(f"printed {i}", "x" * (i % 50))
        print(f"to stderr {i}", file=sys.stderr)
    done.set()
    thread.join()
    """
)


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_line_the_cell_prints_stays_whole_while_another_thread_reports(
    tmp_path: Path, unbuffered: str
) -> None:
    """print() writes its text and its newline apart; a protocol line a reporting thread
    writes in between must not land inside the printed line (the reader would keep only
    the control line): every printed line is read back whole, every report as a metric."""
    lines = 3000
    env = {"PYTHONUNBUFFERED": unbuffered}  # as the local backend's workers run
    log = run_one_rank(tmp_path, PRINTS_WHILE_A_THREAD_REPORTS, {"LINES": lines}, "interleave", env)
    events = [parse(text, 0, nproc=1) for text in log.splitlines()]
    texts = [e.get("text") for e in events if e.kind == "log"]
    expected = [f"printed {i} " + "x" * (i % 50) for i in range(lines)]
    assert [t for t in texts if t.startswith("printed")] == expected
    errors = [f"to stderr {i}" for i in range(lines)]
    assert [t for t in texts if t.startswith("to stderr")] == errors
    strays = [t for t in texts if not t.startswith(("printed", "to stderr"))]
    assert strays == [], strays[:5]
    steps = [e.get("step") for e in events if e.kind == "metric"]
    assert steps == list(range(len(steps))) and steps, "the reports were not all read back"
