"""Every view of a failed job says the one cause the monitor chose, in the same words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.base import JobRecord
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.job import Job
from jupyter_disttrain.monitor import JobMonitor, format_text
from jupyter_disttrain.server.views import job_json
from jupyter_disttrain.spec import JobSpec
from jupyter_disttrain.textview import format_event
from jupyter_disttrain.widgets.header import header_html
from tests.widgets.dom import parse
from tests.widgets.streams import recorded

#: The sidebar JSON of the failed job, as the lab extension's tests read it too
#: (labextension/test/cause.test.ts: the notification and the sidebar row).
SIDEBAR = Path(__file__).resolve().parents[1] / "data" / "events" / "rank1_raises.job.json"
LINE = "rank 1: ValueError: bad batch at step 5; 3 ranks stopped as a consequence"


def failed_job(stream: str = "rank1_raises") -> Job:
    spec = JobSpec("train-cell3-a1", nodes=2, nproc=2)
    mon = JobMonitor(spec.name, "local", 4, nodes=2, nproc=2)
    job = Job(spec, LocalBackend(), mon)
    for event in recorded(stream):
        job.feed(event)
    return job


def sidebar_json(job: Job, snapshot_now: float) -> dict[str, object]:
    final = [e for e in recorded("rank1_raises") if e.kind == "job"][-1]
    record = JobRecord(
        job.name,
        "local",
        "Failed",
        4,
        2,
        2,
        created=snapshot_now - 10,
        ended=final.t,
        reason=str(final.get("message")),
    )
    return dict(job_json(record, job.monitor.snapshot(now=snapshot_now), now=snapshot_now))


def test_header_notification_sidebar_text_cli_and_reason_agree() -> None:
    job = failed_job()
    assert job.reason == LINE
    snap = job.monitor.snapshot()
    # header
    header = parse(header_html(snap))
    reason = header.find_all("distrain-reason")
    assert [node.text for node in reason] == [LINE]
    said = "ValueError: bad batch at step 5; 3 ranks stopped as a consequence"
    assert header_html(snap).count(said) == 1  # the diagnosis adds only the cell line: not shown
    assert format_text(snap).count(said) == 1
    assert header.find_all("distrain-header")[0].attrs["data-state"] == "Failed"
    # text view
    assert f"  {LINE}" in format_text(snap).splitlines()
    # the CLI's line for the job's end
    final = [e for e in recorded("rank1_raises") if e.kind == "job"][-1]
    assert format_event(final, job.reason) == f"job Failed: {LINE}"
    # sidebar JSON (the notification is built from it: labextension/test/cause.test.ts)
    row = sidebar_json(job, final.t + 5)
    assert (row["state"], row["reason"], row["cause_rank"]) == ("Failed", LINE, 1)
    kept = json.loads(SIDEBAR.read_text())
    assert {k: row[k] for k in ("state", "reason", "cause_rank", "diagnosis", "recovered")} == {
        k: kept[k] for k in ("state", "reason", "cause_rank", "diagnosis", "recovered")
    }
    # diagnosis and result name the same rank and exception
    diagnosis = job.diagnosis()
    assert diagnosis is not None and diagnosis.startswith("rank 1 failed (cell line 7): ValueError")
    with pytest.raises(ValueError, match=r"\[rank 1\] bad batch at step 5") as raised:
        job.result(timeout=1)
    trace = raised.value.remote_traceback  # type: ignore[attr-defined]
    assert trace.splitlines()[1].strip().startswith('File "<distrain-cell>", line 7')


def test_the_backends_first_arrival_does_not_override_the_cause() -> None:
    job = failed_job()
    # what the backend said came from whichever error it read first
    job.feed(ev.job_event("Failed", "WorkerFailed", "rank 0: RuntimeError: Connection closed"))
    assert job.reason == LINE
    assert job.monitor.snapshot()["first_failure"] == {
        "rank": 1,
        "t": job.monitor.snapshot()["first_failure"]["t"],  # type: ignore[index]
        "reason": "ValueError: bad batch at step 5",
    }


def test_a_stopped_job_result_raises_job_stopped_not_a_lost_connection() -> None:
    from jupyter_disttrain.results import JobStopped

    job = failed_job("stopped")
    assert job.reason == "stopped by user"
    with pytest.raises(JobStopped, match="stopped by user"):
        job.result(timeout=1)


def write_sidebar_fixture() -> None:
    """Write :data:`SIDEBAR` again from the recorded stream (after re-recording it)."""
    job = failed_job()
    final = [e for e in recorded("rank1_raises") if e.kind == "job"][-1]
    SIDEBAR.write_text(json.dumps(sidebar_json(job, final.t + 5), indent=1) + "\n")


if __name__ == "__main__":
    write_sidebar_fixture()


@pytest.mark.parametrize("stream", ["rank1_raises", "stopped", "restart_success"])
def test_the_launchers_words_are_not_shown_as_the_problem(stream: str) -> None:
    from jupyter_disttrain.widgets.comms_panel import CommsPanel

    job = failed_job(stream)
    snap = job.monitor.snapshot()
    panel = CommsPanel(job.monitor)
    panel.render(snap)
    assert job.monitor.comms().failure != "none"  # the lines do report trouble
    assert "distrain-diagnosis" not in panel.summary_html.value
    shown = header_html(snap) + format_text(snap)
    assert "worker process exited" not in shown.lower() and "nrecognised" not in shown


def test_the_dashboard_pins_the_causes_traceback_and_folds_the_launcher_lines() -> None:
    from jupyter_disttrain.widgets import Dashboard

    job = failed_job()
    dash = Dashboard(job.monitor)
    dash.render()
    header = parse(dash.header.html.value)
    (pinned,) = header.find_all("distrain-cause-traceback")
    assert pinned.attrs["data-rank"] == "1" and "open" in pinned.attrs
    trace = pinned.all_text()
    assert 'File "<distrain-cell>", line 7' in trace and "worker.py" not in trace
    assert trace.rstrip().endswith("ValueError: bad batch at step 5")
    # the job is over: Stop is gone; the actions keep their own column
    assert dash.header.button.layout.display == "none"
    (row,) = [c for c in dash.header.widget.children if hasattr(c, "children")]
    assert "distrain-actions" in row.children[1]._dom_classes
    assert row.children[0].layout.min_width == "0"
    shown = parse(dash.logs.lines.value)
    assert all(n.attrs["data-ranks"] != "job" for n in shown.find_all("distrain-log-line"))
    assert "Root Cause" not in shown.all_text()
    assert "launcher lines folded" in dash.logs.status.value
    dash.logs.launcher.value = True
    dash.render()
    shown = parse(dash.logs.lines.value)
    assert any(n.attrs["data-ranks"] == "job" for n in shown.find_all("distrain-log-line"))
    dash.close()


@pytest.mark.slow
def test_a_live_job_blames_the_raising_rank_everywhere() -> None:
    """A real 2x2 gloo job where rank 2 raises among lost connections."""
    import textwrap

    from jupyter_disttrain.payload import build_payload
    from tests.monitor.record_streams import CELLS

    spec = JobSpec("cause-live", nodes=2, nproc=2)
    backend = LocalBackend()
    plan = backend.plan(
        spec, build_payload(textwrap.dedent(CELLS["rank2_raises"][0]), {}, job=spec.name)
    )
    job = Job(spec, backend, plan=plan)
    job.submission = backend.submit(plan, job.feed)
    assert job.wait(180) == "Failed"
    line = "rank 2: ZeroDivisionError: integer division or modulo by zero"
    assert job.reason.startswith(line)
    snap = job.monitor.snapshot()
    assert snap["cause"] is not None and snap["cause"]["rank"] == 2
    assert [r["state"] for r in snap["ranks"]].count("Failed") == 1
    with pytest.raises(ZeroDivisionError, match=r"\[rank 2\]"):
        job.result(timeout=1)
