"""Recorded local jobs written the way the local backend writes them (state, events, logs)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import jobdir
from jupyter_disttrain.runtime import jobkey, protocol
from jupyter_disttrain.service import recorded
from tests.signing import KEY, key_file


def line(kind: str, rank: int, t: float, **fields: object) -> str:
    """A line signed with the tests' key, which :func:`write_job` gives every job."""
    body = json.dumps({"v": 1, "kind": kind, "rank": rank, "t": t, **fields})
    return f"{protocol.PREFIX}{body} {jobkey.sign(KEY, body.encode())}"


def write_job(
    name: str,
    *,
    state: str = "Succeeded",
    nodes: int = 2,
    nproc: int = 2,
    steps: int = 5,
    created: float | None = None,
    owner_pid: int | None = None,
    notebook: str | None = None,
    checkpoint_uri: str | None = None,
    checkpoint_dir: str | None = None,
    first_lines: list[str] = (),  # type: ignore[assignment]
) -> Path:
    """A job directory under the current ``DISTRAIN_HOME``; ranks report ``steps`` steps.

    Rank 0 reports a checkpoint at ``checkpoint_uri`` (default ``/ckpt/NAME/step-S``);
    ``checkpoint_dir`` is recorded as the job's ``--checkpoint-dir``; ``first_lines``
    are what rank 0 prints right after its ``hello``.
    """
    created = time.time() - 30 if created is None else created
    directory = jobdir.job_dir(name)
    logs = jobdir.logs_dir(directory)
    logs.mkdir(parents=True, exist_ok=True)
    (directory / recorded.VIEW_FILE).unlink(missing_ok=True)  # a new run has none yet
    key_file(directory)
    world = nodes * nproc
    events = [ev.job_event("Pending", "Submitted", f"{world} ranks", t=created)]
    events.append(ev.job_event("Running", "Started", "all agents rendezvoused", t=created + 1))
    for rank in range(world):
        out = [
            line(
                "hello",
                rank,
                created + 2,
                local_rank=rank % nproc,
                world_size=world,
                node_rank=rank // nproc,
                host="box",
                pid=1000 + rank,
            )
        ]
        if rank == 0:
            out.extend(first_lines)
        for step in range(steps):
            t = created + 3 + step
            out.append(line("metric", rank, t, step=step, values={"loss": 1.0 / (step + 1) + rank}))
            out.append(f"rank {rank} step {step}")
        if rank == 0 and steps:
            out.append(
                line(
                    "checkpoint",
                    0,
                    created + 3 + steps,
                    step=steps - 1,
                    uri=checkpoint_uri or f"/ckpt/{name}/step-{steps - 1}",
                    bytes=1234,
                )
            )
        if state == "Succeeded":
            out.append(line("done", rank, created + 4 + steps, seconds=steps))
        (logs / f"rank-{rank}.log").write_text("\n".join(out) + "\n")
    ended = None
    if state in ev.TERMINAL_STATES:
        ended = created + 5 + steps
        events.append(ev.job_event(state, state, "done", t=ended))  # type: ignore[arg-type]
    (directory / "events.jsonl").write_text("".join(ev.to_json(e) + "\n" for e in events))
    record = {
        "name": name,
        "backend": "local",
        "nodes": nodes,
        "nproc": nproc,
        "world_size": world,
        "created": created,
        "owner_pid": owner_pid or os.getpid(),
        "state": state,
        "reason": state,
        "message": "",
    }
    if ended is not None:
        record["ended"] = ended
    if notebook is not None:
        record["notebook"] = notebook
    if checkpoint_dir is not None:
        record["checkpoint_dir"] = checkpoint_dir
    jobdir.write_json_atomic(directory / "state.json", record)
    return directory
