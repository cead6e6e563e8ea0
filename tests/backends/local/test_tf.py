"""TensorFlow jobs on the local backend: real MultiWorkerMirroredStrategy workers on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain import cli
from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.local import LocalBackend, build_plan, jobdir
from jupyter_disttrain.backends.local.tailer import job_trust
from jupyter_disttrain.events import parse_line
from jupyter_disttrain.payload import Payload, build_payload
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.backends.local.test_backend import Collector
from tests.conftest import REPO, assert_no_processes, submit_now

NOTEBOOK = REPO / "notebooks" / "03-tensorflow.ipynb"


def notebook_training() -> tuple[str, str, dict[str, Any]]:
    """The tutorial's ``%%distrain`` line and training cell, and the namespace it runs in.

    The namespace is what the notebook's plain code cells before it define
    (``make_model``, ``EPOCHS``...), built as a kernel would, in ``__main__``.
    """
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    train = next(c for c in code if c.startswith("%%distrain") and "--wait" in c)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for cell in code[: code.index(train)]:
        if not cell.startswith("%"):
            exec(compile(cell, "<notebook>", "exec"), namespace)
    line, _, body = train.partition("\n")
    return line.removeprefix("%%distrain").strip(), body, namespace


def tf_spec(name: str, **kw: Any) -> JobSpec:
    return JobSpec(name, framework="tensorflow", **kw)


def tf_payload(cell: str, ns: dict[str, Any], name: str) -> Payload:
    return build_payload(cell, ns, job=name, framework="tensorflow")


# --- plans and bad input (no processes) ----------------------------------------------------


def test_plan_gives_each_worker_its_tf_config(tmp_path: Path) -> None:
    spec = tf_spec("tf-plan", nodes=3, env=(("LR", "0.1"),))
    payload = build_payload("1", {}, job="tf-plan", framework="tensorflow")
    plan = build_plan(spec, payload, tmp_path, mode="exec", port=1, ports=[5001, 5002, 5003])
    workers = ["127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"]
    for index, node in enumerate(plan.nodes):
        assert json.loads(node.env["TF_CONFIG"]) == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        assert node.env["RANK"] == str(index) and node.env["LR"] == "0.1"
        assert node.module == "jupyter_disttrain.runtime.worker"
        assert node.argv == (str(tmp_path / "payload.pkl"),)
    text = str(plan)
    assert "cluster: TF_CONFIG workers 127.0.0.1:5001,127.0.0.1:5002,127.0.0.1:5003" in text
    assert "a fresh interpreter per worker" in text and "torchrun" not in text
    assert "python -m jupyter_disttrain.runtime.worker" in plan.nodes[2].command()
    with pytest.raises(ValueError, match="distinct ports"):
        build_plan(spec, payload, tmp_path, mode="exec", port=1, ports=[5001, 5001, 5002])
    # The warm launcher is never used for TensorFlow, whatever the configured mode.
    assert LocalBackend(mode="fork").launch_mode(spec) == "exec"
    assert LocalBackend(mode="fork").launch_mode(JobSpec("pt")) == "fork"


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.extension_manager.load_extension("jupyter_disttrain")
    yield ip


BAD_TF_LINES = [
    ("--framework tensorflow --nodes 2 --nproc 2", r"TensorFlow runs one process per worker"),
    ("--framework tensorflow --nproc 2", r"use --nodes 2 --nproc 1"),
    ("--framework tensorflow --dist-backend gloo", r"PyTorch process-group setting"),
    ("--framework tensorflow --dist-backend nccl", r"TensorFlow picks its own collectives"),
    ("--framework tensorflow --max-restarts 2", r"--max-restarts with --framework tensorflow"),
    (
        "--framework tensorflow --backend kubernetes --elastic 1:3",
        r"--elastic is a PyTorch \(torchrun\) option",
    ),
    ("--framework mxnet", r"unknown --framework 'mxnet'; choose one of: pytorch, jax, tensorflow"),
]


@pytest.mark.parametrize(("line", "needle"), BAD_TF_LINES)
def test_bad_tensorflow_options_are_usage_errors(
    shell: InteractiveShell, line: str, needle: str
) -> None:
    with pytest.raises(UsageError, match=needle):
        shell.run_cell_magic("distrain", line, "1")


def test_missing_tensorflow_is_a_clear_error(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if it were not installed
    with pytest.raises(UsageError, match=r"pip install 'jupyter_disttrain\[tensorflow\]'"):
        shell.run_cell_magic("distrain", "--framework tensorflow --nodes 2", "1")
    with pytest.raises(UsageError, match="or pass --image with a TensorFlow image"):
        shell.run_cell_magic("distrain", "--framework tensorflow --backend kubernetes", "1")
    # With an image the notebook needs no TensorFlow: the plan renders (a summary in a cell).
    shell.run_cell_magic(
        "distrain",
        "--framework tensorflow --backend kubernetes --nodes 2 --name tf-img "
        "--image tensorflow/tensorflow:2.21.0 --dry-run",
        "1",
    )
    out = capsys.readouterr().out
    assert "TFJob tf-img" in out and "tensorflow/tensorflow:2.21.0" in out, out


def test_cli_rejects_tensorflow_nproc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    assert cli.main(["run", "--framework", "tensorflow", "--nproc", "4", str(script)]) == 2
    assert "TensorFlow runs one process per worker" in capsys.readouterr().err
    assert (
        cli.main(["run", "--framework", "tensorflow", "--nodes", "2", "--dry-run", str(script)])
        == 0
    )
    out = capsys.readouterr().out
    assert "TF_CONFIG=" in out and "launch: exec" in out


def test_spec_rules_hold_for_the_python_api() -> None:
    with pytest.raises(SpecError, match="one process per worker"):
        tf_spec("tf-api", nproc=2).with_()
    assert tf_spec("tf-api", nodes=4).with_().world_size == 4


# --- real jobs -----------------------------------------------------------------------------


@pytest.mark.slow
def test_failing_worker_is_named_and_everything_ends() -> None:
    cell = textwrap.dedent(
        """
        import time
        import tensorflow as tf
        if strategy.cluster_resolver.task_id == 1:
            raise KeyError("missing column 'label'")
        time.sleep(900)  # worker 0 would wait for its peer for ever
        """
    )
    spec = tf_spec("tf-fail", nodes=2, timeout=1000)
    sink = Collector()
    job = jobs.submit(spec, tf_payload(cell, {}, spec.name), LocalBackend(), listeners=[sink])
    # ends long before worker 0's sleep or the job's timeout would end it, however slowly
    # the workers import TensorFlow on a busy machine
    with pytest.raises(KeyError, match=r"\[rank 1\] .*missing column"):
        job.result(timeout=300)
    assert job.status() == "Failed" and job.reason.startswith("rank 1: KeyError")
    assert [e["rank"] for e in job.errors()] == [1]
    state = json.loads((jobdir.job_dir(spec.name) / "state.json").read_text())
    assert state["exit_codes"][1] == 1  # the failing worker's own exit; worker 0 was ended
    assert_no_processes(jobdir.job_dir(spec.name), sink.pids())


OWNER = textwrap.dedent(
    """
    import time
    from jupyter_disttrain.backends.local import LocalBackend
    from jupyter_disttrain.payload import build_payload
    from jupyter_disttrain.spec import JobSpec
    spec = JobSpec("tf-owner", framework="tensorflow")
    payload = build_payload("import time\\ntime.sleep(300)", {}, job=spec.name,
                            framework="tensorflow")
    backend = LocalBackend()
    run = backend.submit(backend.plan(spec, payload), lambda e: None)
    print("submitted", flush=True)
    time.sleep(600)
    """
)


def hello_pids(name: str) -> list[int]:
    directory = jobdir.job_dir(name)
    trust = job_trust(directory, int((jobdir.read_state(directory) or {})["nodes"]), 1)
    lines = [x for f in jobdir.rank_logs(directory).values() for x in f.read_text().splitlines()]
    hellos = [parse_line(x, 0, trust=trust) for x in lines if '"hello"' in x]
    return [int(e.get("pid")) for e in hellos if e.kind == "hello"]


@pytest.mark.slow
def test_stop_timeout_owner_death_and_only_grpc_ports_beyond_loopback() -> None:
    """Stop (from any process), timeout and a killed kernel each end every worker.

    And, while tf-stop's two workers run (after a ``report()``, so their
    strategy is up): TensorFlow's gRPC server binds every address (no option
    for it), the README's exception. Nothing else of the job listens beyond
    loopback, and those are exactly the workers' ports of TF_CONFIG.
    """
    from tests.backends.local.test_backend import listening

    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    cell = "import time\nreport(step=0, up=1)\ntime.sleep(300)\n"
    stopped, timed = tf_spec("tf-stop", nodes=2, timeout=200), tf_spec("tf-slow", timeout=10)
    sinks = {spec.name: Collector() for spec in (stopped, timed)}
    runs = {
        spec.name: submit_now(
            LocalBackend(), spec, tf_payload(cell, {}, spec.name), sinks[spec.name]
        )
        for spec in (stopped, timed)
    }
    assert owner.stdout is not None and owner.stdout.readline().strip() == "submitted"
    deadline = time.monotonic() + 240  # four workers importing TensorFlow at once
    while len(sinks["tf-stop"].kinds("metric")) < 2 or not hello_pids("tf-owner"):
        assert time.monotonic() < deadline, sinks["tf-stop"].events
        time.sleep(0.1)
    run = runs["tf-stop"]
    assert run.pgid is not None
    found = listening(run)
    wide = {port for ip, port, _, _ in found if ip not in ("127.0.0.1", "::1")}
    ports = {int(a.rsplit(":", 1)[1]) for a in run.plan.rdzv_endpoint.split(",")}
    assert wide <= ports, (wide, ports, found, sinks["tf-stop"].events[-5:])
    assert LocalBackend().stop("tf-stop")  # as another kernel or the CLI would
    owner.kill()  # the kernel that owns tf-owner dies
    owner.wait()
    for name, state, reason in (
        ("tf-stop", "Stopped", "Stopped"),
        ("tf-slow", "Failed", "Timeout"),
    ):
        assert runs[name].join(60)
        final = sinks[name].final()
        assert (final.get("state"), final.get("reason")) == (state, reason), final
        assert_no_processes(jobdir.job_dir(name), sinks[name].pids())
    assert_no_processes(jobdir.job_dir("tf-owner"), hello_pids("tf-owner"), wait=15)
    record = next(r for r in LocalBackend().list_jobs() if r.name == "tf-owner")
    assert record.state == "Stopped"


# run after the tutorial's training cell in the same job: ``accuracy`` is that cell's
CHECKPOINTS = textwrap.dedent(
    """
    import os, tempfile
    import numpy as np
    import tensorflow as tf

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    x = tf.random.stateless_normal((64, 4), seed=(1, 2))
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :2] * 3.0)).repeat().batch(16)
    uris = []
    for step in (1, 2, 3):  # every worker saves; the chief writes and returns the URI
        model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)
        uris.append(save_checkpoint(ckpt, step, {"loss": 1.0 / step}, keep_last=2))
    saved = [w.copy() for w in model.get_weights()]
    for var in model.trainable_variables:
        var.assign(tf.zeros_like(var))
    assert load_checkpoint("latest", into=ckpt) is ckpt
    restored = all(np.array_equal(a, b) for a, b in zip(saved, model.get_weights()))
    scratch = [d for d in os.listdir(tempfile.gettempdir()) if d.startswith("distrain-tf-ckpt-")]
    print(f"worker {strategy.cluster_resolver.task_id}: uris {uris} restored {restored}")
    {"uris": uris, "restored": restored, "scratch": scratch, "kernel": saved[0],
     "accuracy": accuracy, "workers": strategy.num_replicas_in_sync}
    """
)


@pytest.mark.slow
def test_keras_digits_then_checkpoints_on_two_workers() -> None:
    """One job of two workers: the tutorial's training cell, as it is, then checkpoints.

    The notebook's Keras digits cell trains to > 0.85 accuracy, each worker
    reporting its 60 steps, with the job's logs, state and record as listed.
    Then, in the same workers: every worker saves; the chief writes the
    atomic checkpoint; all restore from it.
    """
    from jupyter_disttrain.checkpoints.store import CheckpointStore

    line, cell, namespace = notebook_training()
    assert "--framework tensorflow --nodes 2" in line
    spec = tf_spec("tf-digits", nodes=2, timeout=240)
    sink = Collector()
    started = time.monotonic()
    payload = tf_payload(cell + CHECKPOINTS, namespace, spec.name)
    job = jobs.submit(spec, payload, LocalBackend(), listeners=[sink])
    value = job.result(timeout=240)
    assert value["workers"] == 2 and value["accuracy"] > 0.85, value
    assert job.status() == "Succeeded"
    running = next(e for e in sink.kinds("job") if e.get("state") == "Running")
    print(
        f"launch to all workers connected: {running.t - sink.events[0].t:.1f} s; "
        f"job {time.monotonic() - started:.1f} s"
    )
    hellos = {e.rank: e for e in sink.kinds("hello")}
    assert sorted(hellos) == [0, 1]
    assert {e.get("backend") for e in hellos.values()} == {"tf-ring"}
    assert [hellos[r].get("task") for r in (0, 1)] == ["worker:0", "worker:1"]
    assert all("torch" not in e.get("versions") for e in hellos.values())
    metrics = job.metrics()
    for rank in (0, 1):
        steps = [row["step"] for row in metrics if row["rank"] == rank]
        assert steps == list(range(60)), steps  # 3 epochs x 20 steps, from each worker
    losses = [row["loss"] for row in metrics if row["rank"] == 0]
    assert losses[-1] < losses[0] / 3, losses
    directory = jobdir.job_dir(spec.name)
    assert sorted(p.name for p in jobdir.logs_dir(directory).iterdir()) == [
        "agent-0.log",
        "agent-1.log",
        "rank-0.log",
        "rank-1.log",
    ]
    state = json.loads((directory / "state.json").read_text())
    assert state["framework"] == "tensorflow" and state["mode"] == "exec"
    assert state["exit_codes"] == [0, 0]
    worker_log = LocalBackend().logs(spec.name, rank=1)
    assert "worker 1: test accuracy" in worker_log, worker_log
    record = next(r for r in LocalBackend().list_jobs() if r.name == spec.name)
    assert record.state == "Succeeded" and record.world_size == 2
    # the checkpoints, saved by the same workers after the tutorial's training
    assert value["restored"] and value["scratch"] == [], value
    assert [u.rsplit("/", 1)[-1].split("-")[1] for u in value["uris"]] == [
        "000000001",
        "000000002",
        "000000003",
    ]
    assert all(u.endswith(".tf") for u in value["uris"])
    assert "uris [None, None, None] restored True" in worker_log, worker_log
    assert [e.get("step") for e in sink.kinds("checkpoint")] == [1, 2, 3]
    store = CheckpointStore(str(directory / "checkpoints"))
    infos = store.list()
    assert [i.step for i in infos] == [2, 3]  # keep_last=2
    assert {i.kind for i in infos} == {"tf"} and all(i.ok for i in infos)
    assert store.verify() == {2: "ok", 3: "ok"}
    assert infos[-1].world_size == 2 and infos[-1].tensors and infos[-1].metrics == {"loss": 1 / 3}
    details = store.describe(3)
    assert set(details.keys) <= {"model", "optimizer"}  # TensorFlow keys each variable once
    kernel = next(t for t in details.tensors if t.shape == (4, 2))
    assert kernel.dtype == "float32" and kernel.name.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
    arrays = store.load(3)
    assert (arrays[kernel.name] == value["kernel"]).all()
    leftovers = [p.name for p in (directory / "checkpoints").iterdir()]
    assert not [n for n in leftovers if n.startswith(".tmp-")], leftovers
    assert_no_processes(directory, sink.pids())
