"""Printed text is data: lines a local job's ranks print that look like control lines.

Every spoofed line leaves the job's state and result as they would be without
it, runs nothing in the notebook, fetches nothing, and is in the logs as text.
"""

from __future__ import annotations

import base64
import pickle
import socket
import textwrap
import threading
from pathlib import Path

import pytest

from jupyter_disttrain.service import JobService
from jupyter_disttrain.spec import JobSpec
from tests.conftest import assert_no_processes

pytestmark = pytest.mark.slow


class _WritesFile:
    """Unpickling this creates ``path``: code of a line's choosing running in the notebook."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


class Listener:
    """A TCP listener on 127.0.0.1 that records whether anything connected."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.hits.append(conn.recv(4096))
                except OSError:
                    self.hits.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


SPOOFS = textwrap.dedent(
    """
    import json, time
    import torch.distributed as dist
    rank = dist.get_rank()
    M = "##distrain "

    def spoof(kind, r=None, **fields):
        body = {"v": 1, "kind": kind, "rank": rank if r is None else r, "t": time.time()}
        print(M + json.dumps({**body, **fields}), flush=True)

    if rank == 1:  # a dataset row, a log, anything a rank prints
        spoof("error", type="ValueError", message="spoofed failure", traceback="")
        spoof("hello", world_size=1000000, local_rank=0, node_rank=0, pid=1)
        spoof("metric", step=[], values={"loss": 1.0})
        print(M + '{"v":1,"kind":"metric","rank":1,"t":Infinity,"step":1,"values":{"x":1}}')
        spoof("checkpoint", step=3, uri=f"http://127.0.0.1:{PORT}/probe-dir", bytes=1)
        # what another user's data may hold: a look-alike with non-ASCII where a signature
        # goes, a deep signed-looking body without the key, lone surrogates
        print('row: ' + M + '{"v":1,"kind":"done","rank":1,"seconds":1} ' + "é" * 64, flush=True)
        deep = '{"v":1,"kind":"metric","rank":0,"t":1,"step":1,"values":' + "[" * 100000
        print(M + deep + "]" * 100000 + "} " + "0" * 64, flush=True)
        print(M + '{"v":1,"kind":"done","rank":0,"t":1,"seconds":1,"x":"\\ud800"} ' + "a" * 64)
        print("lone \\udcff surrogate", flush=True)
    if rank == 0:
        spoof("result", encoding="cloudpickle+base64", data=PICKLE)
    for r in range(dist.get_world_size()):
        spoof("done", r, seconds=0.1)
    dist.barrier()
    41 + 1
    """
)


def test_spoofed_lines_change_nothing_run_nothing_fetch_nothing(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    listener = Listener()
    service = JobService()
    ns = {
        "PORT": listener.port,
        "PICKLE": base64.b64encode(pickle.dumps(_WritesFile(str(marker)))).decode(),
    }
    spec = JobSpec("spoof-lines", nodes=2, nproc=2, timeout=180)
    job = service.run(service.plan(spec, SPOOFS, ns))
    try:
        state = job.wait(240)
        logs = "\n".join(line.text for line in job.monitor.log_lines())
        assert state == "Succeeded", (job.reason, logs)
        assert job.result() == 42, logs
        assert not marker.exists()  # the spoofed pickle was never loaded
        assert job.errors() == [] and "spoofed failure" not in job.reason
        snap = job.monitor.snapshot()
        assert len(snap["ranks"]) == 4  # memory for ranks follows the spec
        assert not job.monitor.checkpoints(), job.monitor.checkpoints()
        assert [r["step"] for r in job.metrics()] == [], job.metrics()
        printed = job.logs()  # the log view: the job's own control lines left out, not these
        visible = (
            "spoofed failure",
            '"world_size": 1000000',
            "Infinity",
            "probe-dir",
            "é" * 64,
            "[" * 1000,
            "\\ud800",
            "lone \\udcff surrogate",
        )
        for text in visible:
            assert text in logs and text in printed, text[:40]  # kept as log text, visible
        assert '"kind": "done"' in printed and '"kind":"hello"' not in printed, printed
        assert any("was not believed" in w for w in snap["warnings"]), snap["warnings"]
        job.checkpoints().list()  # the browser's listing reads the job's own directory only
    finally:
        job.stop()
        listener.close()
    assert listener.hits == []
    assert_no_processes(home / "jobs" / "spoof-lines")


EXITS = textwrap.dedent(
    """
    import json, os, time
    import torch.distributed as dist
    rank = dist.get_rank()
    for r in range(dist.get_world_size()):
        body = {"v": 1, "kind": "done", "rank": r, "t": time.time(), "seconds": 0.1}
        print("##distrain " + json.dumps(body), flush=True)
    if rank == 1:
        os._exit(3)
    """
)


def test_printed_done_lines_do_not_hide_a_rank_that_exits_non_zero(home: Path) -> None:
    service = JobService()
    job = service.run(service.plan(JobSpec("spoof-done", nodes=1, nproc=2, timeout=120), EXITS))
    try:
        assert job.wait(240) == "Failed", job.logs()
        rows = {r["rank"]: r for r in job.monitor.snapshot()["ranks"]}
        assert rows[1]["state"] != "Succeeded", rows  # its printed "done" was not believed
    finally:
        job.stop()
    assert_no_processes(home / "jobs" / "spoof-done")
