"""PyTorch: torchrun agents do the rendezvous and start (and restart) the workers."""

from __future__ import annotations

from ..runtime.checkpoint import format as fmt
from .base import AGENTS, Framework

PYTORCH = Framework(
    name="pytorch",
    title="PyTorch",
    package="torch",
    distributions=("torch",),
    install="pip install torch",
    runtime="jupyter_disttrain.runtime.worker:init_torch",
    launch=AGENTS,
    fork_safe=True,
    restarts=True,
    sessions=True,
    elastic=True,
    checkpoint_formats=(fmt.FULL_FORMAT, fmt.SHARDED_FORMAT),
    image="pytorch/pytorch:{torch}-cuda{cuda}-runtime",
    cuda_tag=True,
)
