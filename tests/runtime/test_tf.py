"""The TensorFlow worker runtime: TF_CONFIG ranks, and real worker processes without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import free_ports
from jupyter_disttrain.events import Event
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.runtime.tf import TFConfigError, apply_env, parse_tf_config
from tests.signing import parse


def tf_config(cluster: dict[str, list[str]], kind: str, index: int, **extra: str) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}, **extra})


LOCAL = {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}
TFJOB = {  # what the training operator sets for Chief 1 + Worker 2
    "chief": ["j-chief-0.default.svc:2222"],
    "worker": ["j-worker-0.default.svc:2222", "j-worker-1.default.svc:2222"],
}


@pytest.mark.parametrize(
    ("cluster", "kind", "index", "expected"),
    [
        (LOCAL, "worker", 0, (0, 3, "worker:0")),
        (LOCAL, "worker", 2, (2, 3, "worker:2")),
        (TFJOB, "chief", 0, (0, 3, "chief:0")),
        (TFJOB, "worker", 0, (1, 3, "worker:0")),
        (TFJOB, "worker", 1, (2, 3, "worker:1")),
        ({"master": ["m:1"], "worker": ["w:1"]}, "worker", 0, (1, 2, "worker:0")),
    ],
)
def test_rank_from_tf_config(
    cluster: dict[str, list[str]], kind: str, index: int, expected: tuple[int, int, str]
) -> None:
    assert parse_tf_config(tf_config(cluster, kind, index, environment="cloud")) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "TF_CONFIG is not valid"),
        (tf_config({"worker": ["a:1"], "ps": ["p:1"]}, "ps", 0), "no parameter servers"),
        (tf_config({"chief": ["c:1"], "evaluator": ["e:1"]}, "evaluator", 0), "evaluators"),
        (tf_config(LOCAL, "worker", 3), "not in its cluster"),
        ('{"cluster": [1], "task": {}}', "TF_CONFIG is not valid"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {}}', "has no task type"),
    ],
)
def test_bad_tf_config_is_explained(text: str, needle: str) -> None:
    with pytest.raises(TFConfigError, match=needle):
        parse_tf_config(text)


def test_apply_env_sets_ranks_once() -> None:
    env = {"TF_CONFIG": tf_config(TFJOB, "worker", 1)}
    apply_env(env)
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "3" and env["GROUP_RANK"] == "2"
    assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
    torchrun = {"TF_CONFIG": tf_config(TFJOB, "chief", 0), "RANK": "5"}
    apply_env(torchrun)
    assert torchrun["RANK"] == "5" and "WORLD_SIZE" not in torchrun
    broken = {"TF_CONFIG": "{"}
    apply_env(broken)  # left for the worker to report as an error line
    assert "RANK" not in broken
    empty: dict[str, str] = {}
    apply_env(empty)
    assert empty == {}


#: Starts the worker with torch and the notebook side of the package impossible to import.
BLOCKED = textwrap.dedent(
    """
    import sys, importlib.abc
    BLOCKED = tuple(sys.argv[2].split(","))
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.startswith(BLOCKED):
                raise ImportError(f"blocked: {name}")
            return None
    sys.meta_path.insert(0, Block())
    from jupyter_disttrain.runtime import worker
    sys.exit(worker.main([sys.argv[1]]))
    """
)
NOTEBOOK_SIDE = (
    "torch,IPython,ipykernel,ipywidgets,plotly,kubernetes,psutil,jupyter_disttrain.job,"
    "jupyter_disttrain.magics,jupyter_disttrain.backends,jupyter_disttrain.monitor"
)


def start_workers(
    payload: Path, nodes: int, blocked: str = NOTEBOOK_SIDE
) -> list[subprocess.Popen[str]]:
    ports = free_ports(nodes)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(nodes):
        env = {**os.environ, "TF_CONFIG": tf_config(cluster, "worker", index)}
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DISTRAIN_LOG_DIR", "DISTRAIN_JOB_DIR"):
            env.pop(key, None)
        argv = [sys.executable, "-c", BLOCKED, str(payload), blocked]
        pipe = subprocess.PIPE
        procs.append(subprocess.Popen(argv, env=env, stdout=pipe, stderr=pipe, text=True))
    return procs


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, list[Event], str]]:
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.communicate()
            raise
        events = [parse(line, 0, len(procs), 1) for line in stdout.splitlines()]
        out.append((proc.returncode, [e for e in events if e.kind != "log"], stdout + stderr))
    return out


@pytest.mark.slow
def test_two_tensorflow_workers_without_torch(tmp_path: Path) -> None:
    """Strategy, ranks, report and result: the runtime needs TensorFlow, not torch."""
    cell = textwrap.dedent(
        """
        import sys
        import tensorflow as tf
        assert "torch" not in sys.modules
        assert tf.distribute.MultiWorkerMirroredStrategy() is strategy  # the job's own
        index = strategy.cluster_resolver.task_id
        per_replica = strategy.run(lambda: tf.constant([float(index + 1)] * 3))
        total = strategy.reduce("SUM", per_replica, axis=None)
        # Keras' fit() reduces nested values and scalars with an axis under this strategy.
        two = strategy.run(lambda: tf.constant(2.0))
        pair = strategy.reduce("MEAN", (per_replica, two), axis=0)
        report(step=0, loss=tf.constant(0.5) * (index + 1))
        {"total": total.numpy().tolist(), "pair": [float(v) for v in pair], "index": index}
        """
    )
    payload = tmp_path / "payload.pkl"
    payload.write_bytes(build_payload(cell, {}, job="tf-rt", framework="tensorflow").data)
    results = finish(start_workers(payload, 2))
    for code, _, output in results:
        assert code == 0, output
    (_, chief, _), (_, worker, _) = results
    hello = chief[0]
    assert hello.kind == "hello" and hello.rank == 0, chief
    assert hello.get("backend") == "tf-ring" and hello.get("task") == "worker:0"
    assert hello.get("world_size") == 2 and hello.get("node_rank") == 0
    assert "tensorflow" in hello.get("versions") and "torch" not in hello.get("versions")
    assert worker[0].rank == 1 and worker[0].get("task") == "worker:1"
    metrics = {e.rank: e.get("values") for _, evs, _ in results for e in evs if e.kind == "metric"}
    assert metrics == {0: {"loss": 0.5}, 1: {"loss": 1.0}}
    result = next(e for e in chief if e.kind == "result")
    assert decode_result(result.fields) == {"total": [3.0] * 3, "pair": [1.5, 2.0], "index": 0}
    assert not any(e.kind == "result" for e in worker)  # only the chief returns the value
    assert [e.kind for e in chief][-1] == "done" and [e.kind for e in worker][-1] == "done"


def test_worker_without_tensorflow_says_how_to_install(tmp_path: Path) -> None:
    payload = tmp_path / "payload.pkl"
    payload.write_bytes(build_payload("1", {}, job="tf-missing", framework="tensorflow").data)
    ((code, events, output),) = finish(start_workers(payload, 1, NOTEBOOK_SIDE + ",tensorflow"))
    assert code == 2, output
    error = events[-1]
    assert error.kind == "error" and error.rank == 0
    assert "TensorFlow is not installed in this worker" in error.get("message")
    assert "pip install 'jupyter_disttrain[tensorflow]'" in error.get("message")


def test_tensorflow_checkpoint_names() -> None:
    from jupyter_disttrain.runtime.checkpoint import format as fmt

    name = fmt.payload_name(40, "1a2b3c", fmt.TF)
    assert name == "step-000000040-1a2b3c.tf" and fmt.PAYLOAD_RE.match(name)
    assert fmt.payload_name(40, "1a2b3c", fmt.SHARDED).endswith(".dcp")
    assert fmt.payload_name(40, "1a2b3c", fmt.FULL).endswith(".pt")
