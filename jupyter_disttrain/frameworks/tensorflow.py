"""TensorFlow: one process per worker, told its cluster by ``TF_CONFIG``.

MultiWorkerMirroredStrategy uses every device of its machine, so a node runs
one worker (``--nproc 1``); TensorFlow starts threads when it is imported, so
each worker is a fresh interpreter; nothing restarts a worker on one machine
(a TFJob restarts its pods on a cluster).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..runtime.checkpoint import format as fmt
from ..spec import JobSpec, SpecError
from .base import WORKERS, Framework


@dataclass(frozen=True)
class TensorFlow(Framework):
    """TensorFlow's rules: one process per node, no PyTorch process-group settings."""

    def check_spec(self, spec: JobSpec) -> None:
        """``--nproc`` must be 1 and ``--dist-backend`` left at ``auto``."""
        if spec.nproc != 1:
            raise SpecError(
                f"--nproc {spec.nproc} with --framework tensorflow: TensorFlow runs one process "
                "per worker, and MultiWorkerMirroredStrategy uses every device of its machine; "
                f"use --nodes {spec.nodes * spec.nproc} --nproc 1 for "
                f"{spec.nodes * spec.nproc} workers"
            )
        if spec.dist_backend != "auto":
            raise SpecError(
                f"--dist-backend {spec.dist_backend} is a PyTorch process-group setting; "
                "TensorFlow picks its own collectives (ring on CPU, NCCL on GPUs): remove it"
            )

    def cluster_env(self, addresses: Sequence[str], index: int) -> dict[str, str]:
        """``TF_CONFIG`` naming every worker, this one ``index`` (worker 0 acts as chief)."""
        config = {
            "cluster": {"worker": list(addresses)},
            "task": {"type": "worker", "index": index},
        }
        return {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}

    def describe_cluster(self, endpoint: str) -> str:
        """The plan's line: the workers' addresses."""
        return f"cluster: TF_CONFIG workers {endpoint} (worker 0 is the chief)"


TENSORFLOW = TensorFlow(
    name="tensorflow",
    title="TensorFlow",
    collectives="tf",
    package="tensorflow",
    distributions=("tensorflow", "tensorflow-cpu"),
    install=(
        "pip install 'jupyter_disttrain[tensorflow]' (installs tensorflow-cpu; "
        "tensorflow on a GPU machine)"
    ),
    runtime="jupyter_disttrain.runtime.tf:init_worker",
    launch=WORKERS,
    fork_safe=False,
    restarts=False,
    sessions=False,
    elastic=False,
    checkpoint_formats=(fmt.TF_FORMAT,),
    image="tensorflow/tensorflow:{tensorflow}",
    gpu_image="tensorflow/tensorflow:{tensorflow}-gpu",
)
