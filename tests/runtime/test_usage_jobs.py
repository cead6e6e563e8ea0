"""Resources and progress from real local jobs (torchrun, gloo): what the monitor shows."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_disttrain.monitor import resource_outliers
from jupyter_disttrain.service import JobService
from jupyter_disttrain.widgets.rank_table import rank_table_html
from tests.conftest import assert_no_processes
from tests.test_service import parse
from tests.widgets.dom import parse as parse_html

#: They compare the ranks' CPU and memory figures: alone (``make test``'s serial run).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

#: Rank 1 holds ~200 MB and burns CPU; the others sleep; until the test says to finish.
BUSY_CELL = """import os, time
import torch.distributed as dist
busy = dist.get_rank() == 1
block = b"x" * (200 << 20) if busy else b""
end = time.monotonic() + 60
while time.monotonic() < end and not os.path.exists(FINISH):
    if not busy:
        time.sleep(0.05)
dist.barrier()
"""


def test_the_rank_that_works_shows_higher_figures_than_the_sleepers(
    home: Path, tmp_path: Path
) -> None:
    service = JobService()
    finish = tmp_path / "finish"
    spec = service.spec(
        parse(
            "--nodes",
            "1",
            "--nproc",
            "3",
            "--name",
            "res-busy",
            "--env",
            "DISTRAIN_RESOURCES_INTERVAL=0.25",
        )
    )
    job = service.run(service.plan(spec, BUSY_CELL, {"FINISH": str(finish)}))
    try:
        deadline = time.monotonic() + 50
        snap = job.monitor.snapshot()
        while 1 not in resource_outliers(snap["ranks"]) or any(
            r["cpu_pct"] is None for r in snap["ranks"]
        ):
            assert time.monotonic() < deadline, (snap["ranks"], job.logs())
            time.sleep(0.25)
            snap = job.monitor.snapshot()
        cpu = [float(r["cpu_pct"] or 0) for r in snap["ranks"]]
        rss = [int(r["rss_bytes"] or 0) for r in snap["ranks"]]
        assert cpu[1] > 3 * max(cpu[0], cpu[2]) + 10, snap["ranks"]
        assert rss[1] > max(rss[0], rss[2]) + (150 << 20), snap["ranks"]
        table = {
            int(r.attrs["data-rank"]): r
            for r in parse_html(rank_table_html(snap)).find_all("distrain-rank-row")
        }
        assert "distrain-outlier" in table[1].classes, table[1].attrs
        assert "far above the others" in table[1].attrs["title"]
        assert all("distrain-outlier" not in table[r].classes for r in (0, 2))
        finish.touch()
        assert job.wait(120) == "Succeeded", job.logs()
    finally:
        finish.touch()
        job.stop()
    logs = job.logs()
    assert "resources" not in logs, logs  # quiet lines stay out of the logs
    pids = [r.pid for r in job.monitor.ranks() if r.pid]
    assert_no_processes(home / "jobs" / "res-busy", pids)


#: Every rank sleeps in silence; only resource samples are written meanwhile.
SILENT_CELL = """import time
report(step=0, loss=1.0)
time.sleep(600)
"""


def test_resource_samples_do_not_hide_a_hang(home: Path) -> None:
    service = JobService()
    interval = "DISTRAIN_RESOURCES_INTERVAL=0.2"
    spec = service.spec(
        parse(
            "--nodes",
            "2",
            "--nproc",
            "1",
            "--name",
            "res-hang",
            "--hang-after",
            "3",
            "--env",
            interval,
        )
    )
    job = service.run(service.plan(spec, SILENT_CELL))
    try:
        deadline = time.monotonic() + 90
        sentence = job.diagnosis()
        while not (sentence and sentence.startswith("Hang")):
            assert time.monotonic() < deadline, (
                sentence,
                job.monitor.snapshot()["ranks"],
                job.logs(),
            )
            time.sleep(0.25)
            sentence = job.diagnosis()
        rows = job.monitor.snapshot()["ranks"]
        assert all(r["cpu_pct"] is not None for r in rows), rows  # samples kept coming
    finally:
        job.stop()
    pids = [r.pid for r in job.monitor.ranks() if r.pid]
    assert_no_processes(home / "jobs" / "res-hang", pids)


PROGRESS_CELL = """import time
for step in range(STEPS):
    time.sleep(0.1)
    report(step=step, total=STEPS, loss=1.0 / (step + 1))
"""


def test_report_total_gives_progress_with_an_eta(home: Path) -> None:
    service = JobService()
    spec = service.spec(parse("--nodes", "1", "--nproc", "2", "--name", "res-progress"))
    job = service.run(service.plan(spec, PROGRESS_CELL, {"STEPS": 40}))
    try:
        deadline = time.monotonic() + 90
        seen = job.monitor.snapshot()["progress"]
        while seen is None or seen["eta_s"] is None or seen["step"] < 8:
            assert time.monotonic() < deadline, (seen, job.logs())
            time.sleep(0.2)
            seen = job.monitor.snapshot()["progress"]
        assert seen["total"] == 40 and 0 < seen["fraction"] < 1, seen
        assert seen["rate_per_s"] is not None and 1 < seen["rate_per_s"] < 15, seen
        assert 0 < seen["eta_s"] < 60, seen
        assert job.wait(120) == "Succeeded", job.logs()
    finally:
        job.stop()
    final = job.monitor.snapshot()
    assert final["progress"] is not None
    assert (final["progress"]["step"], final["progress"]["fraction"]) == (40, 1.0)
    assert final["progress"]["eta_s"] == 0.0
    assert [name for name in final["metrics"]] == ["loss"]  # total is no metric


TQDM_CELL = """import time
from tqdm import tqdm
for batch in tqdm(range(30), mininterval=0.05):
    time.sleep(0.05)
"""


def test_a_tqdm_bar_on_rank_0_drives_the_progress(home: Path) -> None:
    pytest.importorskip("tqdm")
    service = JobService()
    spec = service.spec(parse("--nodes", "1", "--nproc", "2", "--name", "res-tqdm"))
    job = service.run(service.plan(spec, TQDM_CELL))
    assert job.wait(120) == "Succeeded", job.logs()
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None, job.logs()
    assert (progress["step"], progress["total"], progress["fraction"]) == (30, 30, 1.0)
    # each redraw is kept (none swallowed by the progress lines) and read as a terminal
    # shows it: one line per rank's bar, at its end
    for rank in (0, 1):
        bars = [line.text for line in job.monitor.log_lines([rank]) if "|" in line.text]
        logged = [text for text in job.logs(rank).split("\n") if "|" in text]
        for shown in (bars, logged):
            assert len(shown) == 1 and shown[0].startswith("100%|") and "30/30" in shown[0], (
                shown,
                job.logs(),
            )
