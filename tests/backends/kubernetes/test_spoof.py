"""Printed text is data on Kubernetes: spoofed control lines in the pod logs the notebook follows.

Rank 0's log carries the other ranks' lines through the relay; a line counts
only when the job key (in the payload Secret) signed it.
"""

from __future__ import annotations

import base64
import pickle
import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.backends.kubernetes.test_backend_trainjob import trainer  # noqa: F401 (fixture)
from tests.backends.local.test_spoof import _WritesFile

pytestmark = pytest.mark.slow


CELL = textwrap.dedent(
    """
    import json, time
    import torch.distributed as dist
    rank = dist.get_rank()

    def spoof(kind, r, **fields):
        body = {"v": 1, "kind": kind, "rank": r, "t": time.time(), **fields}
        print("##distrain " + json.dumps(body), flush=True)

    for step in range(3):
        report(step=step, loss=1.0 / (step + 1))
    if rank == 0:  # rank 0's log is the one the notebook follows, relayed lines and all
        spoof("error", 2, type="ValueError", message="spoofed for rank 2", traceback="")
        spoof("result", 0, encoding="cloudpickle+base64", data=PICKLE)
    if rank == 1:
        spoof("hello", 1, world_size=1000000, local_rank=1, node_rank=0)
        M = "##distrain "
        # what another user's data may hold: a look-alike with non-ASCII where a signature
        # goes, a deep signed-looking body without the key, lone surrogates
        print('row: ' + M + '{"v":1,"kind":"done","rank":1,"seconds":1} ' + "é" * 64, flush=True)
        deep = '{"v": 1, "kind": "metric", "rank": 0, "t": 1, "values": ' + "[" * 100000
        print(M + deep + "]" * 100000 + "} " + "0" * 64, flush=True)
        print(M + '{"v":1,"kind":"done","rank":0,"t":1,"seconds":1,"x":"\\ud800"} ' + "a" * 64)
        print("lone \\udcff surrogate", flush=True)
        for r in range(4):
            spoof("done", r, seconds=0.1)
    dist.barrier()
    "the real result"
    """
)


@pytest.mark.usefixtures("trainer")
def test_spoofed_lines_in_followed_pod_logs_change_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    ns = {"PICKLE": base64.b64encode(pickle.dumps(_WritesFile(str(marker)))).decode()}
    backend = KubernetesBackend()
    spec = JobSpec("tj-spoof", backend="kubernetes", nodes=2, nproc=2, timeout=240)
    plan = backend.plan(spec, build_payload(CELL, ns, job="tj-spoof"))
    assert plan.objects[0]["kind"] == "Secret"  # the payload carries the job key
    job = jobs.default_service().run(plan)
    try:
        assert job.result(timeout=240) == "the real result", job.logs()
        assert job.status() == "Succeeded" and not marker.exists()
        assert job.errors() == [], job.errors()
        steps = {r: sorted(m["step"] for m in job.metrics() if m["rank"] == r) for r in range(4)}
        assert steps == {r: [0, 1, 2] for r in range(4)}, steps  # signed lines through the relay
        logs = "\n".join(line.text for line in job.monitor.log_lines())
        assert "spoofed for rank 2" in logs and '"world_size": 1000000' in logs, logs
        for text in ("é" * 64, "[" * 1000, "\\ud800", "lone \\udcff surrogate"):
            assert text in logs, text[:40]  # printed text reaches the logs whatever it holds
        printed = backend.logs("tj-spoof")  # the job's own control lines left out, not these
        assert "spoofed for rank 2" in printed and '"kind":"metric"' not in printed, printed
        assert len(job.monitor.snapshot()["ranks"]) == 4
    finally:
        backend.stop("tj-spoof")
