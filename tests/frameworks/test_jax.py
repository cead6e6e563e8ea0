"""JAX jobs on the local backend: real ``jax.distributed`` processes on loopback, on CPU."""

from __future__ import annotations

import itertools
import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.local import LocalBackend, build_plan, jobdir
from jupyter_disttrain.job import Job
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.backends.local.test_backend import Collector
from tests.conftest import assert_no_processes
from tests.optional import requires

pytestmark = requires("jax", "JAX is an optional extra: pip install '.[jax]'")


def orbax_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("orbax") is not None


def jax_spec(name: str, **kw: Any) -> JobSpec:
    return JobSpec(name, framework="jax", **kw)


def submit(spec: JobSpec, cell: str, sink: Collector, ns: dict[str, Any] | None = None) -> Job:
    payload = build_payload(cell, ns or {}, job=spec.name, framework="jax")
    return jobs.submit(spec, payload, LocalBackend(), listeners=[sink])


# --- plans and bad input (no processes) ----------------------------------------------------


def test_plan_runs_one_process_per_rank_with_the_coordinator_on_loopback(tmp_path: Path) -> None:
    spec = jax_spec("jax-plan", nodes=2, nproc=2)
    payload = build_payload("1", {}, job="jax-plan", framework="jax")
    ports = [5001, 5002, 5003, 5004]
    plan = build_plan(spec, payload, tmp_path, mode="fork", port=1, ports=ports)
    assert len(plan.nodes) == 4
    for rank, node in enumerate(plan.nodes):
        env = node.env
        assert env["JAX_COORDINATOR_ADDRESS"] == "127.0.0.1:5001"
        assert (env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"]) == ("4", str(rank))
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "4")
        assert (env["GROUP_RANK"], env["LOCAL_RANK"]) == (str(rank // 2), str(rank % 2))
        assert env["JAX_PLATFORMS"] == "cpu" and node.module == "jupyter_disttrain.runtime.worker"
    text = str(plan)
    assert "cluster: jax.distributed coordinator at 127.0.0.1:5001" in text, text
    assert "a fresh interpreter per worker: JAX is not fork-safe" in text, text
    assert LocalBackend(mode="fork").launch_mode(spec) == "exec"
    with pytest.raises(ValueError, match="4 processes needs as many distinct ports"):
        build_plan(spec, payload, tmp_path, mode="exec", port=1, ports=[5001, 5001, 5002, 5003])


def test_pytorch_settings_are_refused() -> None:
    with pytest.raises(SpecError, match="JAX picks its own collectives"):
        jax_spec("jax-bad", dist_backend="gloo").with_()
    assert jax_spec("jax-ok", nodes=2, nproc=3).with_().world_size == 6


# --- a real 2x2 job: psum, SGD, checkpoints, result ---------------------------------------

TRAIN = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    rank, world = jax.process_index(), jax.process_count()
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    mine = multihost_utils.host_local_array_to_global_array(
        np.array([rank + 1.0], np.float32), mesh, P("data"))
    psum = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "data"), mesh=mesh,
                                 in_specs=P("data"), out_specs=P()))
    total = float(np.asarray(psum(mine).addressable_data(0))[0])

    rng = np.random.default_rng(rank)
    x_local = rng.normal(size=(32, 4)).astype(np.float32)
    y_local = x_local @ np.array([1.0, -2.0, 0.5, 3.0], np.float32) + 0.1 * rank
    x, y = (multihost_utils.host_local_array_to_global_array(a, mesh, P("data"))
            for a in (x_local, y_local))
    replicated = NamedSharding(mesh, P())
    params = jax.device_put({"w": jnp.zeros(4), "b": jnp.zeros(())}, replicated)

    def errors(p, x, y):
        return (x @ p["w"] + p["b"] - y) ** 2

    @jax.jit
    def step(p, x, y):
        loss, grads = jax.value_and_grad(lambda p: errors(p, x, y).mean())(p)
        return jax.tree.map(lambda a, g: a - 0.05 * g, p, grads), errors(p, x, y)

    for i in range(STEPS):
        params, per_example = step(params, x, y)
        local = float(np.mean([np.asarray(s.data) for s in per_example.addressable_shards]))
        report(step=i, loss=local)
        if SAVE_EVERY and (i + 1) % SAVE_EVERY == 0:
            save_checkpoint(params, i + 1, {"loss": local})
    print(f"process {rank}: psum {total} devices {jax.device_count()}")
    {"psum": total, "devices": jax.device_count(), "params": params}
    """
)


@pytest.fixture(scope="module")
def trained() -> Iterator[tuple[Job, Collector, float]]:
    spec = jax_spec("jax-train", nodes=2, nproc=2, timeout=240)
    sink = Collector()
    started = time.monotonic()
    job = submit(spec, TRAIN, sink, {"STEPS": 20, "SAVE_EVERY": 10})
    job.result(timeout=240)
    yield job, sink, time.monotonic() - started


def test_a_2x2_job_runs_psum_and_sgd_on_every_process(
    trained: tuple[Job, Collector, float],
) -> None:
    job, sink, took = trained
    print(f"2x2 JAX job: {took:.1f} s")
    value = job.result()
    assert value["psum"] == 10.0 and value["devices"] == 4, value  # 1 + 2 + 3 + 4
    params = value["params"]
    assert type(params["w"]).__module__ == "numpy", type(params["w"])  # jax arrays as numpy
    assert params["w"].shape == (4,) and abs(float(params["w"][1]) + 2.0) < 0.5, params
    hellos = {e.rank: e for e in sink.kinds("hello")}
    assert sorted(hellos) == [0, 1, 2, 3]
    assert {e.get("backend") for e in hellos.values()} == {"jax-gloo"}
    assert [hellos[r].get("task") for r in range(4)] == [f"process:{r}" for r in range(4)]
    assert [hellos[r].get("node_rank") for r in range(4)] == [0, 0, 1, 1]
    assert all("jax" in e.get("versions") for e in hellos.values())
    metrics = job.metrics()
    for rank in range(4):
        losses = [row["loss"] for row in metrics if row["rank"] == rank]
        assert len(losses) == 20, losses
        assert all(b < a for a, b in itertools.pairwise(losses)), (rank, losses)
    assert "process 3: psum 10.0 devices 4" in job.logs(rank=3)
    directory = jobdir.job_dir("jax-train")
    state = json.loads((directory / "state.json").read_text())
    assert state["framework"] == "jax" and state["exit_codes"] == [0, 0, 0, 0], state
    assert_no_processes(directory, sink.pids())


# LOAD then SHARDED run as one 1x2 job (on the object store): the first loads the 2x2
# job's checkpoint, the second saves and loads its own; the job's value holds both
LOAD = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    template = jax.device_put({"w": jnp.zeros(4), "b": jnp.zeros(())}, NamedSharding(mesh, P()))
    restored = load_checkpoint(URI, into=template)
    plain = load_checkpoint(URI)
    same = bool(np.array_equal(np.asarray(restored["w"]), plain["w"]))
    loaded = {"w": restored["w"], "mesh": dict(restored["w"].sharding.mesh.shape), "same": same,
              "world": jax.process_count()}
    """
)


SHARDED = textwrap.dedent(
    """
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharded = NamedSharding(mesh, P("data"))
    state = {"w": jax.device_put(np.arange(8.0, dtype=np.float32), sharded), "n": [np.int32(3)]}
    uri = save_checkpoint(state, 5)  # w's halves live on two processes: gathered, then written
    back = load_checkpoint(uri, into={"w": jax.device_put(np.zeros(8, np.float32), sharded),
                                      "n": [np.int32(0)]})
    mine = np.asarray(back["w"].addressable_data(0)).tolist()
    print(f"process {jax.process_index()} holds {mine}")
    {"uri": uri, "plain": load_checkpoint(uri), "n": int(back["n"][0]), "loaded": loaded}
    """
)


def test_a_checkpoint_saved_on_2x2_loads_on_1x2_and_one_on_an_object_store_is_npz(
    trained: tuple[Job, Collector, float], s3: dict[str, str]
) -> None:
    """Two proofs, one 1x2 job whose checkpoint directory is on an object store.

    The 2x2 job's checkpoints (every process's shards) load on 1x2, placed on
    the loading job's own mesh. Then, on the object store, a checkpoint is npz
    and gathers arrays sharded over the two processes.
    """
    from jupyter_disttrain.checkpoints.store import CheckpointStore

    job, sink, _ = trained
    saved = sink.kinds("checkpoint")
    assert [e.get("step") for e in saved] == [10, 20] and {e.rank for e in saved} == {0}
    uri = saved[-1].get("uri")
    assert uri.endswith(".jax"), uri
    store = CheckpointStore(str(jobdir.job_dir("jax-train") / "checkpoints"))
    infos = store.list()
    assert [i.step for i in infos] == [10, 20] and {i.kind for i in infos} == {"jax"}
    assert store.verify() == {10: "ok", 20: "ok"} and infos[-1].world_size == 4
    files = sorted(p.relative_to(Path(uri)).as_posix() for p in Path(uri).rglob("*") if p.is_file())
    if orbax_installed():  # every process wrote its own shards with orbax
        assert "state/_METADATA" in files and any(".process_3" in f for f in files), files
    else:
        assert files == ["arrays.npz", "tree.json"], files
    notebook_side = store.load(20)  # numpy arrays, no JAX needed in the notebook
    assert (notebook_side["w"] == job.result()["params"]["w"]).all()

    spec = jax_spec("jax-s3", nodes=1, nproc=2, timeout=180, checkpoint_dir="s3://ckpt-bucket/jx")
    both = submit(spec, LOAD + SHARDED, Collector(), {"URI": uri})
    value = both.result(timeout=180)
    loaded = value["loaded"]
    assert loaded["world"] == 2 and loaded["same"], loaded
    assert loaded["mesh"] == {"data": 2}, loaded  # placed on the loading job's own mesh
    assert (loaded["w"] == job.result()["params"]["w"]).all()
    # the object store's checkpoint, saved by the same job
    assert value["uri"].startswith("s3://ckpt-bucket/jx/step-000000005-"), value
    assert value["plain"]["w"].tolist() == list(range(8)) and value["n"] == 3, value
    assert value["plain"]["n"][0] == 3 and isinstance(value["plain"]["n"], list)
    assert "process 1 holds [4.0, 5.0, 6.0, 7.0]" in both.logs(rank=1), both.logs()
    s3_store = CheckpointStore("s3://ckpt-bucket/jx")
    (info,) = s3_store.list()
    assert info.kind == "jax" and info.world_size == 2 and s3_store.verify() == {5: "ok"}
    assert s3_store.load(5)["w"].tolist() == list(range(8))


# --- failures: a process that raises, a process that skips a collective --------------------

RAISES = textwrap.dedent(
    """
    import jax, numpy as np
    from jax.experimental import multihost_utils
    def check(batch):
        if jax.process_index() == 2:
            raise ValueError(f"batch {batch} has no labels")
    check(7)
    multihost_utils.sync_global_devices("after-check")
    """
)


def test_a_process_that_raises_is_named_with_its_traceback() -> None:
    spec = jax_spec("jax-raise", nodes=2, nproc=2, timeout=120)
    sink = Collector()
    started = time.monotonic()
    job = submit(spec, RAISES, sink)
    with pytest.raises(ValueError, match=r"\[rank 2\] .*batch 7 has no labels"):
        job.result(timeout=120)
    assert time.monotonic() - started < 90
    assert job.status() == "Failed" and job.reason.startswith("rank 2: ValueError"), job.reason
    errors = job.errors()
    assert [e["rank"] for e in errors] == [2], errors
    trace = errors[0]["traceback"]
    assert "line 6, in <module>" in trace and "line 5, in check" in trace, trace
    assert_no_processes(jobdir.job_dir(spec.name), sink.pids())


HANG = """import time
import jax, numpy as np
from jax.experimental import multihost_utils
rank = jax.process_index()
for step in range(2):
    multihost_utils.sync_global_devices(f"step-{step}")
    report(step=step, rank=rank)
if rank != 1:
    multihost_utils.sync_global_devices("step-2")
else:
    time.sleep(600)
"""


def test_a_process_that_skips_a_collective_is_named_with_its_frame(home: Path) -> None:
    service = JobService()
    spec = jax_spec("jax-hang", nodes=2, nproc=2, hang_after=3, timeout=200)
    job = service.run(service.plan(spec, HANG))
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        sentence = job.diagnosis()
        while not (sentence and sentence.startswith("Hang")):
            assert time.monotonic() < deadline, (sentence, job.logs())
            time.sleep(0.2)
            sentence = job.diagnosis()
        pids = [r.pid for r in job.monitor.ranks() if r.pid]
        assert len(pids) == 4
        listening = {
            (c.laddr.ip, pid)
            for pid in pids
            for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        }
        loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}  # the coordinator (gRPC), gloo
        assert listening and {ip for ip, _ in listening} <= loopback, listening
        assert "rank 1 is in time.sleep (cell line 11)" in sentence, sentence
        assert "ranks 0,2-3 wait in sync_global_devices (cell line 9)" in sentence, sentence
        where = job.where(timeout=20)
        assert [g.ranks for g in where.groups] == [(0, 2, 3), (1,)], where.text()
        assert 'File "<distrain-cell>", line 11, in <module>' in where.text(), where.text()
    finally:
        job.stop()
    assert job.status() == "Stopped"
    assert_no_processes(home / "jobs" / "jax-hang", pids)


# --- the magic ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shell() -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.extension_manager.load_extension("jupyter_disttrain")
    yield ip


def test_the_magic_refuses_what_a_jax_job_cannot_be(
    shell: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="JAX picks its own collectives"):
        shell.run_cell_magic("distrain", "--framework jax --dist-backend nccl", "1")
    with pytest.raises(UsageError, match=r"--max-restarts with --framework jax"):
        shell.run_cell_magic("distrain", "--framework jax --max-restarts 1", "1")
    shell.run_cell_magic("distrain", "--framework jax --nodes 2 --nproc 2 --name jx --dry-run", "1")
    out = capsys.readouterr().out
    assert "JAX_COORDINATOR_ADDRESS=127.0.0.1:" in out and "launch: exec" in out, out
    monkeypatch.setitem(sys.modules, "jax", None)  # as if it were not installed
    with pytest.raises(UsageError, match=r"pip install 'jupyter_disttrain\[jax\]'"):
        shell.run_cell_magic("distrain", "--framework jax --nodes 2", "1")


# --- a session: JAX processes that stay up between cells -----------------------------------


def test_a_jax_session_keeps_each_process_state_between_cells() -> None:
    from jupyter_disttrain.sessions import Session

    service = JobService()
    pids: list[int] = []
    session: Session = service.start_session(
        jax_spec("jax-sess", nodes=1, nproc=2),
        listeners=[lambda e: pids.append(int(e.get("pid"))) if e.kind == "hello" else None],
    )
    try:
        assert session.run("import jax, numpy as np\nw = np.zeros(3) + jax.process_index()") is None
        cell = "from jax.experimental import multihost_utils\nw = w + 1\n"
        cell += "multihost_utils.sync_global_devices('cell')\n(jax.process_count(), w)"
        count, w = session.run(cell)
        assert count == 2 and w.tolist() == [1.0, 1.0, 1.0]
        with pytest.raises(KeyError, match=r"\[rank 1\]"):
            session.run("if jax.process_index() == 1:\n    raise KeyError('no batch')")
        assert session.run("float(w.sum())") == 3.0  # the session stays usable
    finally:
        assert service.stop_session(session.name) in ("Succeeded", "Stopped")
    assert len(pids) == 2
    assert_no_processes(jobdir.job_dir("jax-sess"), pids)
