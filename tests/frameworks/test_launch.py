"""Launchers: the built-in shapes, and a framework's own launcher added from outside the package.

The toy framework's launcher starts one process per node that starts its
node's ranks itself, as ``mpirun`` or the DeepSpeed launcher do. It lives in
modules of a temporary directory, like a third party's; nothing of the
package names it, yet the local backend plans it and runs a real job with it.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import frameworks
from jupyter_disttrain.backends.local import LocalBackend, build_plan
from jupyter_disttrain.checkpoints.store import CheckpointStore
from jupyter_disttrain.frameworks import LaunchContext, ProcessPerWorker, TorchrunAgents
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.runtime.checkpoint.format import unregister_format
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import Collector
from tests.conftest import assert_no_processes, submit_now

TOY_FRAMEWORK = textwrap.dedent(
    '''
    """A third party's framework: its launcher runs one process per node (``toynode``), its
    saves write a checkpoint format of its own (``.toyst`` text files)."""
    import os
    import tempfile
    from dataclasses import dataclass

    from jupyter_disttrain.frameworks import Framework, Launcher, Process
    from jupyter_disttrain.runtime.checkpoint import library
    from jupyter_disttrain.runtime.checkpoint.format import CheckpointFormat, register_format

    # registered where this module is imported: in the workers (and by the framework's
    # lookup in the notebook); its reader gives the notebook the saved text
    TOY_STATE = register_format(
        CheckpointFormat("toystate", "toyst", reader="toylaunch:read")
    )


    class NodeStartsRanks(Launcher):
        """One ``toynode`` per node; it starts the node's ranks itself."""

        def processes(self, fw, ctx):
            spec = ctx.spec
            shape = {"TOY_NODES": str(spec.nodes), "TOY_NPROC": str(spec.nproc)}
            return tuple(
                Process(node, (ctx.payload_path,), {**ctx.env, **shape, "TOY_NODE": str(node)},
                        ctx.log(node), "toynode", "toynode")
                for node in range(spec.nodes)
            )


    @dataclass(frozen=True)
    class Toy(Framework):
        def describe_cluster(self, endpoint):
            return "cluster: each toy node starts its own ranks"


    def save(step, state):
        """Rank 0 writes ``state`` as text and records it in the job's checkpoint directory."""
        if os.environ["RANK"] != "0":
            return None
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
            fh.write(f"toy state {state}")
        try:
            return library.record(fh.name, step, TOY_STATE.layout, {"loss": 0.25})
        finally:
            os.unlink(fh.name)


    def read(cdir, entry):
        """The notebook side of the format: the saved text, its checksum checked."""
        return cdir.read_verified(entry).decode()


    def init(payload, rank):
        """The worker side: the cell sees ``launcher`` (the pid of the node that started it)
        and ``save``."""
        return "toy", {"launcher": os.getppid(), "save": save}, {"launcher_pid": os.getppid()}


    TOY = Toy(name="toy", title="Toy", package="json", distributions=(), install="",
              runtime="toylaunch:init", launch=NodeStartsRanks(), restarts=False,
              checkpoint_formats=(TOY_STATE,))
    '''
)

TOY_NODE = textwrap.dedent(
    '''
    """One toy node: start this node's ranks as workers, wait, exit as the first that failed."""
    import os
    import subprocess
    import sys

    nodes, nproc = int(os.environ["TOY_NODES"]), int(os.environ["TOY_NPROC"])
    node = int(os.environ["TOY_NODE"])
    children = []
    for local in range(nproc):
        env = dict(os.environ, RANK=str(node * nproc + local), WORLD_SIZE=str(nodes * nproc),
                   GROUP_RANK=str(node), LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(nproc))
        command = [sys.executable, "-m", "jupyter_disttrain.runtime.worker", sys.argv[1]]
        children.append(subprocess.Popen(command, env=env))
    codes = [child.wait() for child in children]
    sys.exit(next((code for code in codes if code), 0))
    '''
)


@pytest.fixture
def toy_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory with the toy framework and its node process, on ``sys.path``, registered."""
    (tmp_path / "toylaunch.py").write_text(TOY_FRAMEWORK)
    (tmp_path / "toynode.py").write_text(TOY_NODE)
    sys.path.insert(0, str(tmp_path))
    frameworks.register("toylaunch:TOY", name="toy")
    try:
        yield tmp_path
    finally:
        frameworks.unregister("toy")
        unregister_format("toystate")
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toylaunch", None)


def context(spec: JobSpec, ports: tuple[int, ...] = ()) -> LaunchContext:
    return LaunchContext(
        spec=spec,
        payload_path="/j/payload.pkl",
        logs="/j/logs",
        host="127.0.0.1",
        port=29500,
        ports=ports,
        worker=("-m", "w"),
        env={"A": "1"},
    )


def test_torchrun_agents_are_one_forkable_agent_per_node() -> None:
    spec = JobSpec("pt", nodes=2, nproc=3, dist_backend="nccl").with_()
    launcher = TorchrunAgents()
    ctx = context(spec)
    agents = launcher.processes(frameworks.framework("pytorch"), ctx)
    assert launcher.forks and launcher.ports(spec) == 0
    assert [a.node for a in agents] == [0, 1] and [a.log for a in agents] == [
        "/j/logs/agent-0.log",
        "/j/logs/agent-1.log",
    ]
    assert agents[1].argv[-3:] == ("-m", "w", "/j/payload.pkl") and "is_host=0" in agents[1].argv
    log_dir = agents[0].argv.index("--log-dir") + 1  # torchrun's folders in the job's
    assert agents[0].argv[log_dir] == "/j/torchelastic"
    assert agents[0].command().startswith("A=1 torchrun --nnodes 2 --nproc-per-node 3")
    assert launcher.endpoint(ctx) == "127.0.0.1:29500"
    (note,) = launcher.notes(spec)
    assert note == "note: nccl needs CUDA; without it the workers fall back to gloo"


def test_process_per_worker_needs_a_port_per_rank() -> None:
    spec = JobSpec("tf", nodes=2, nproc=1, framework="tensorflow").with_()
    launcher = ProcessPerWorker()
    tf = frameworks.framework("tensorflow")
    workers = launcher.processes(tf, context(spec, (5001, 5002)))
    assert not launcher.forks and launcher.ports(spec) == 2
    assert [w.env["RANK"] for w in workers] == ["0", "1"] and workers[1].env["A"] == "1"
    assert launcher.endpoint(context(spec, (5001, 5002))) == "127.0.0.1:5001,127.0.0.1:5002"
    with pytest.raises(ValueError, match="a TensorFlow job of 2 processes needs as many distinct"):
        launcher.processes(tf, context(spec, (5001, 5001)))


def test_a_frameworks_own_launcher_plans_one_process_per_node(toy_dir: Path) -> None:
    spec = JobSpec("toy-plan", nodes=2, nproc=3, framework="toy").with_()
    payload = build_payload("launcher", {}, job=spec.name, framework="toy")
    plan = build_plan(spec, payload, toy_dir / "job", mode="fork", port=1)
    assert plan.mode == "exec"  # its launcher does not fork
    assert [n.module for n in plan.nodes] == ["toynode", "toynode"]
    assert [n.env["TOY_NODE"] for n in plan.nodes] == ["0", "1"]
    assert all(n.env["TOY_NPROC"] == "3" and "DISTRAIN_JOB_DIR" in n.env for n in plan.nodes)
    assert "cluster: each toy node starts its own ranks" in str(plan)
    assert f"toynode {toy_dir / 'job' / 'payload.pkl'}" in str(plan)
    assert LocalBackend(mode="fork").launch_mode(spec) == "exec"


@pytest.mark.slow
def test_a_toy_job_runs_through_its_own_launcher_and_saves_its_own_format(toy_dir: Path) -> None:
    checkpoints = toy_dir / "checkpoints"
    spec = JobSpec(
        "toy-launch",
        nodes=2,
        nproc=2,
        framework="toy",
        timeout=120,
        checkpoint_dir=str(checkpoints),
        env=(("PYTHONPATH", str(toy_dir)),),
    ).with_()
    payload = build_payload("save(7, launcher)\nlauncher", {}, job=spec.name, framework="toy")
    sink = Collector()
    run = submit_now(LocalBackend(mode="fork"), spec, payload, sink)
    logs = Path(run.plan.job_dir) / "logs"
    assert run.join(120), (sink.events[-20:], sorted(p.name for p in logs.iterdir()))
    assert sink.final().get("state") == "Succeeded", sink.events[-20:]
    hellos = {e.rank: e for e in sink.kinds("hello")}
    assert sorted(hellos) == [0, 1, 2, 3], sink.events[-20:]
    launchers = [int(hellos[r].get("launcher_pid")) for r in range(4)]
    # ranks 0 and 1 were started by node 0's process, ranks 2 and 3 by node 1's
    assert launchers[0] == launchers[1] != launchers[2] == launchers[3], launchers
    assert not set(launchers) & set(sink.pids())  # the node processes, not ranks
    assert {e.get("backend") for e in hellos.values()} == {"toy"}
    (result,) = sink.kinds("result")
    assert decode_result(result.fields) == launchers[0]
    assert_no_processes(Path(run.plan.job_dir), [*sink.pids(), *launchers])
    # the checkpoint rank 0 saved in the toy's format, listed and verified from here
    store = CheckpointStore(str(checkpoints))
    assert store.steps() == [7], sink.events[-20:]
    info = store.info(7, verify=True)
    assert info.ok and info.kind == "toystate" and info.uri.endswith(".toyst"), info
    assert info.metrics == {"loss": 0.25} and info.world_size == 4
    saved = checkpoints / Path(info.uri).name
    assert saved.read_text() == store.load(7) == f"toy state {launchers[0]}"
