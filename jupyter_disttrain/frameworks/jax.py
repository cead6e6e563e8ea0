"""JAX: one process per worker, ``jax.distributed.initialize()`` from the environment.

A job of ``--nodes N --nproc M`` is ``N x M`` JAX processes (one per rank, as
Kubeflow Trainer's ``jax-distributed`` runtime runs one per pod). JAX starts
threads when its backend comes up, so each process is a fresh interpreter;
nothing restarts a process on one machine. Locally the processes run on CPU:
process 0 hosts JAX's coordination service on a free port of 127.0.0.1 and
``jax.devices()`` lists every process's device (see ``runtime/jax.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..runtime.checkpoint import format as fmt
from ..runtime.jax import ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID
from ..spec import JobSpec, SpecError
from .base import WORKERS, Framework


@dataclass(frozen=True)
class Jax(Framework):
    """JAX's rules: no PyTorch process-group settings; processes told their cluster by env."""

    def check_spec(self, spec: JobSpec) -> None:
        """``--dist-backend`` must stay ``auto`` (JAX picks its own collectives)."""
        if spec.dist_backend != "auto":
            raise SpecError(
                f"--dist-backend {spec.dist_backend} is a PyTorch process-group setting; JAX "
                "picks its own collectives (gloo on CPU, NCCL on GPUs): remove it"
            )

    def cluster_env(self, addresses: Sequence[str], index: int) -> dict[str, str]:
        """Process ``index`` of ``len(addresses)`` (one per process), on CPU: the coordinator
        listens on the first address (the job's store is its key-value store)."""
        return {
            ENV_COORDINATOR: addresses[0],
            ENV_NUM_PROCESSES: str(len(addresses)),
            ENV_PROCESS_ID: str(index),
            "JAX_PLATFORMS": "cpu",
        }

    def describe_cluster(self, endpoint: str) -> str:
        """The plan's line: where the coordinator listens."""
        first = endpoint.split(",")[0]
        return f"cluster: jax.distributed coordinator at {first} (process 0 hosts it)"


JAX = Jax(
    name="jax",
    title="JAX",
    collectives="jax",
    package="jax",
    distributions=("jax",),
    install="pip install 'jupyter_disttrain[jax]' (jax with CPU jaxlib)",
    runtime="jupyter_disttrain.runtime.jax:init_worker",
    launch=WORKERS,
    fork_safe=False,
    restarts=False,
    sessions=True,
    elastic=False,
    checkpoint_formats=(fmt.JAX_FORMAT,),
    image="",  # a TrainJob keeps its runtime's image (jax-distributed: NVIDIA's JAX image)
)
