"""Record the event streams of real small local jobs into tests/data/events/*.jsonl.

Run ``python -m tests.monitor.record_streams [NAME ...]`` to record them again;
the cause-ranking tests replay what these jobs really sent (torchrun, gloo).
"""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from pathlib import Path

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec

OUT = Path(__file__).resolve().parents[1] / "data" / "events"

_LOOP = """
import time, torch, torch.distributed as dist
rank = dist.get_rank()
for step in range(40):
    t = torch.ones(4)
    dist.all_reduce(t)
    report(step=step, loss=1.0 / (step + 1))
    {body}
    time.sleep(0.05)
"""

CELLS: dict[str, tuple[str, dict[str, object]]] = {
    # rank 1 (rank 2) raises inside a loop of all_reduce; the others lose their peer
    "rank1_raises": (
        _LOOP.format(body='if rank == 1 and step == 5: raise ValueError("bad batch at step 5")'),
        {},
    ),
    "rank2_raises": (_LOOP.format(body="if rank == 2 and step == 5: 1 // 0"), {}),
    # a rank leaves without an exception: only the launcher says so
    "rank1_exits": (_LOOP.format(body="if rank == 1 and step == 5: import os; os._exit(3)"), {}),
    # stopped by the user mid-run
    "stopped": (_LOOP.format(body="time.sleep(0.2)"), {"stop_after": 4.0}),
    # rank 1 fails on the first attempt only; torchrun restarts and the job succeeds
    "restart_success": (
        _LOOP.format(
            body='if rank == 1 and step == 3 and os.environ.get("TORCHELASTIC_RESTART_COUNT")'
            ' == "0": raise RuntimeError("flaky loader")'
        ).replace("import time", "import os, time"),
        {"max_restarts": 1},
    ),
    # nccl asked for on a machine without CUDA: the workers fall back to gloo
    "nccl_fallback": (_LOOP.format(body="pass"), {"dist_backend": "nccl"}),
    # rank 1 sleeps inside the loop; the others wait in all_reduce; the hang watch reads it
    "hang": (
        _LOOP.format(body="if rank == 1 and step == 5: time.sleep(3600)"),
        {"hang_after": 3.0, "stop_after": 14.0},
    ),
}


def record(name: str) -> Path:
    """Run the job ``name`` of :data:`CELLS` (2 nodes x 2 procs, gloo) and write its events."""
    cell, opts = CELLS[name]
    stop_after = opts.pop("stop_after", None)
    spec = JobSpec(f"rec-{name.replace('_', '-')}-{int(time.time())}", nodes=2, nproc=2, **opts)  # type: ignore[arg-type]
    opts["stop_after"] = stop_after
    events: list[ev.Event] = []
    lock = threading.Lock()

    def sink(event: ev.Event) -> None:
        with lock:
            events.append(event)

    backend = LocalBackend()
    run = backend.submit(
        backend.plan(spec, build_payload(textwrap.dedent(cell), {}, job=spec.name)), sink
    )
    if stop_after is not None:
        time.sleep(float(stop_after))  # type: ignore[arg-type]
        run.stop("stopped by user")
    if not run.join(180):
        run.stop("recording timed out")
        run.join(30)
    path = OUT / f"{name}.jsonl"
    with path.open("w") as out:
        for e in events:
            out.write(ev.to_json(e) + "\n")
    return path


if __name__ == "__main__":
    for wanted in sys.argv[1:] or list(CELLS):
        print(record(wanted))
