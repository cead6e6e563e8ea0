"""TensorFlow: one fresh process per worker with TF_CONFIG, its spec rules."""

from __future__ import annotations

import importlib
import json

import pytest

from jupyter_disttrain.frameworks import WORKERS, framework
from jupyter_disttrain.frameworks.tensorflow import TENSORFLOW
from jupyter_disttrain.runtime.checkpoint import format as fmt
from jupyter_disttrain.runtime.tf import parse_tf_config
from jupyter_disttrain.spec import JobSpec, SpecError


def test_the_registry_gives_the_builtin() -> None:
    assert framework("tensorflow") is TENSORFLOW


def test_what_tensorflow_decides() -> None:
    assert TENSORFLOW.launch == WORKERS and not TENSORFLOW.fork_safe
    assert not (TENSORFLOW.restarts or TENSORFLOW.sessions or TENSORFLOW.elastic)
    assert TENSORFLOW.checkpoint_layouts == (fmt.TF,)
    assert TENSORFLOW.package == "tensorflow"


def test_cluster_env_is_the_tf_config_the_worker_runtime_reads() -> None:
    workers = ["127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"]
    for index in range(3):
        env = TENSORFLOW.cluster_env(workers, index)
        assert set(env) == {"TF_CONFIG"}
        config = json.loads(env["TF_CONFIG"])
        assert config == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        assert parse_tf_config(env["TF_CONFIG"]) == (index, 3, f"worker:{index}")


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"nproc": 2}, r"TensorFlow runs one process per worker.*--nodes 4 --nproc 1"),
        ({"dist_backend": "gloo"}, r"--dist-backend gloo is a PyTorch process-group setting"),
    ],
)
def test_spec_rules(changes: dict[str, object], needle: str) -> None:
    spec = JobSpec("tf", nodes=2, framework="tensorflow", **changes)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=needle):
        TENSORFLOW.check_spec(spec)
    TENSORFLOW.check_spec(JobSpec("tf", nodes=4, framework="tensorflow"))


def test_runtime_entry_is_the_workers_tf_set_up() -> None:
    module, _, name = TENSORFLOW.runtime.partition(":")
    assert callable(getattr(importlib.import_module(module), name))
