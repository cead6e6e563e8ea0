"""PyTorch: torchrun agents, fork-safe, restarts, sessions, full and sharded checkpoints."""

from __future__ import annotations

import importlib
import importlib.metadata

import torch

from jupyter_disttrain.frameworks import AGENTS, framework
from jupyter_disttrain.frameworks.pytorch import PYTORCH
from jupyter_disttrain.runtime.checkpoint import format as fmt
from jupyter_disttrain.spec import JobSpec


def test_the_registry_gives_the_builtin() -> None:
    assert framework("pytorch") is PYTORCH


def test_what_pytorch_decides() -> None:
    assert PYTORCH.launch == AGENTS and PYTORCH.fork_safe and PYTORCH.restarts
    assert PYTORCH.sessions and PYTORCH.elastic
    assert PYTORCH.checkpoint_layouts == PYTORCH.checkpoint_kinds == (fmt.FULL, fmt.SHARDED)
    assert PYTORCH.describe_cluster("127.0.0.1:29500") == (
        "rendezvous: c10d at 127.0.0.1:29500 (node 0 hosts the store)"
    )
    assert PYTORCH.cluster_env(["127.0.0.1:1"], 0) == {}  # torchrun's rendezvous tells them
    PYTORCH.check_spec(JobSpec("pt", nodes=2, nproc=4, dist_backend="gloo"))  # no extra rule


def test_notebook_version_is_the_installed_torch() -> None:
    assert PYTORCH.notebook_version() == importlib.metadata.version("torch")
    assert torch.__version__.startswith(str(PYTORCH.notebook_version()).split("+")[0])


def test_runtime_entry_is_the_workers_torch_set_up() -> None:
    module, _, name = PYTORCH.runtime.partition(":")
    assert callable(getattr(importlib.import_module(module), name))
