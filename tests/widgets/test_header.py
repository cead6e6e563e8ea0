"""The header: the start-up timeline, the recovered note, Stop and Where while a job goes on."""

from __future__ import annotations

from jupyter_disttrain import events as ev
from jupyter_disttrain.events import Event, job_event, restart_event
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.monitor.where import Where
from jupyter_disttrain.widgets.dashboard import Dashboard
from jupyter_disttrain.widgets.header import HeaderPanel, header_html
from tests.monitor.test_cause import GLOO_CLOSED
from tests.monitor.test_phases import T0, k8s_job

from .dom import parse


def test_a_job_stuck_in_image_pull_highlights_it_and_says_what_it_waits_for() -> None:
    mon = JobMonitor("tj", "kubernetes", 4, nodes=2, nproc=2, phases=ev.PHASES)
    mon.feed_many([e for e in k8s_job() if e.kind == "job" or e.t <= T0 + 6.5])
    html = parse(header_html(mon.snapshot(now=T0 + 6.5 + 130)))
    [timeline] = html.find_all("distrain-phases")
    assert timeline.attrs["data-phase"] == "image"
    spans = {n.attrs["data-phase"]: n for n in html.find_all("distrain-phase")}
    assert list(spans) == list(ev.PHASES)
    states = {name: n.attrs["data-state"] for name, n in spans.items()}
    assert states == {
        "queued": "done",
        "scheduled": "done",
        "image": "current",
        "started": "pending",
        "rendezvous": "pending",
        "first_step": "pending",
    }
    assert spans["queued"].all_text() == "queued 5.5s"
    assert spans["image"].all_text() == "image 2m10s"
    assert spans["first_step"].all_text() == "first step"
    [waiting] = html.find_all("distrain-waiting")
    assert waiting.all_text() == (
        'waiting 2m10s in: image pull (ranks 0-1: pod tj-0 pulling image "pt"; '
        'ranks 2-3: pod tj-1 pulling image "pt")'
    )


def test_after_the_first_step_the_timeline_stays_with_the_time_to_it() -> None:
    mon = JobMonitor("tj", "kubernetes", 4, nodes=2, nproc=2, phases=ev.PHASES)
    mon.feed_many(k8s_job())
    html = parse(header_html(mon.snapshot(now=T0 + 100)))
    [timeline] = html.find_all("distrain-phases")
    assert timeline.attrs["data-phase"] == ""
    assert timeline.all_text() == (
        "queued 5.5s · scheduled 1.0s · image 30.0s · started 1.0s · rendezvous 2.8s · "
        "first step 2.7s (43.0s to first step)"
    )
    assert not html.find_all("distrain-waiting")
    assert not parse(header_html(JobMonitor("l", "local", 1).snapshot())).find_all(
        "distrain-phases"
    )


def test_a_job_that_ended_before_its_first_step_marks_the_phase_unfinished() -> None:
    mon = JobMonitor("tj", "kubernetes", 4, nodes=2, nproc=2, phases=ev.PHASES)
    mon.feed_many([e for e in k8s_job() if e.kind != "metric"])
    mon.feed(ev.job_event("Stopped", "Stopped", "stopped by user", t=T0 + 50))
    html = parse(header_html(mon.snapshot(now=T0 + 100)))
    spans = {n.attrs["data-phase"]: n for n in html.find_all("distrain-phase")}
    assert spans["first_step"].attrs["data-state"] == "unfinished"
    assert spans["first_step"].all_text() == "first step 9.7s (not finished)"
    assert not html.find_all("distrain-waiting")


def test_stop_and_where_stay_while_a_killed_rank_restarts_and_the_header_names_the_checkpoint() -> (
    None
):
    """02-checkpoints: rank 2 SIGKILLed, torchrun restarts every rank, which load checkpoint 30."""

    def where() -> Where:
        raise AssertionError("not asked")

    events = [job_event("Running", t=1.0)]
    events += [Event("hello", r, 1.0 + r / 10, {"pid": 100 + r}) for r in range(4)]
    lost = GLOO_CLOSED.replace("Connection closed", "Read error")
    events.append(Event("error", 1, 2.9, {"type": "RuntimeError", "message": lost}))
    events.append(Event("rank", 2, 2.95, {"state": "Failed", "exit_code": -9, "reason": "SIGKILL"}))
    text = "failed (exitcode: -9) local_rank: 0 (pid: 102) of binary: /usr/bin/python3"
    events.append(Event("log", None, 3.0, {"source": "agent-1", "text": text}))
    events.append(restart_event(1, "workers restarted by torchrun", t=4.0))
    events += [Event("hello", r, 5.0, {"pid": 200 + r, "restart": 1}) for r in range(4)]
    events.append(Event("loaded", 0, 5.5, {"step": 30, "uri": "/ckpt/step-30.pt"}))
    mon = JobMonitor("ckpt", "local", 4, nodes=2, nproc=2)
    dash = Dashboard(mon, stop=lambda: None, where=where)
    panel = dash.header
    seen = set()
    for event in events:  # the moment it reads Failed before the restart too: torchrun runs
        mon.feed(event)
        dash.render()
        snap = mon.snapshot()
        seen |= {snap["state"], *(r["state"] for r in snap["ranks"])}
        shown = (panel.button.layout.display, panel.where_button.layout.display)
        assert "none" not in shown and not panel.button.disabled, (event, snap["state"])
    assert {"Failed", "Restarting"} <= seen, seen
    for r in range(4):
        mon.feed(Event("done", r, 9.0, {}))
    snap = mon.snapshot()
    assert snap["state"] == "Succeeded" and [r["restarts"] for r in snap["ranks"]] == [1] * 4
    mon.feed(job_event("Succeeded", t=9.5))  # the backend's end: nothing left to stop
    dash.render()
    [note] = parse(panel.html.value).find_all("distrain-note")
    assert note.all_text() == (
        "recovered from 1 failure (rank 2 was killed (SIGKILL)); resumed from checkpoint 30"
    )
    assert panel.button.layout.display == "none"


def test_a_paused_rank_is_said_once_and_its_markup_is_not_escaped_twice() -> None:
    mon = JobMonitor("dbg", "local", 2)
    mon.feed_many(
        [
            job_event("Running", t=1.0),
            *[Event("hello", r, 1.0, {"pid": 100 + r}) for r in range(2)],
            Event("paused", 1, 2.0, {"file": "cell", "line": 9, "function": "<module>", "port": 1}),
        ]
    )
    html = header_html(mon.snapshot(), note="")
    text = "".join(n.all_text() for n in parse(html).find_all("distrain-note"))
    assert text.count("rank 1 paused at cell:9 in <module>") == 1 and "&lt;" not in text, text


def test_a_session_cell_that_raised_on_every_rank_reads_raised_and_ready_for_the_next() -> None:
    """The cell's job failed, but every rank lives on: Raised, the cause, what comes next."""
    mon = JobMonitor("sess", "local", 4, nodes=2, nproc=2)
    mon.feed_many([job_event("Running", t=1.0), *[Event("hello", r, 1.0, {}) for r in range(4)]])
    for rank in range(4):
        mon.feed(Event("error", rank, 2.0, {"type": "ValueError", "message": "bad shape"}))
        mon.feed(Event("cell", rank, 2.1, {"id": 1, "phase": "end", "status": "error"}))
    mon.feed(job_event("Failed", "Failed", "rank 0 raised", t=3.0))
    panel = HeaderPanel(lambda: None)
    panel.render(mon.snapshot())
    page = parse(panel.html.value)
    [header] = page.find_all("distrain-header")
    assert header.attrs["data-state"] == "Raised"
    [badge] = [b for b in page.find_all("distrain-badge") if b.attrs.get("data-field") == "state"]
    assert badge.all_text() == "Raised" and "distrain-state-raised" in badge.classes
    [cause] = page.find_all("distrain-reason")
    assert cause.all_text() == "all 4 ranks: ValueError: bad shape"
    [ready] = page.find_all("distrain-diagnosis")
    assert ready.all_text() == (
        "the cell raised on all 4 ranks; the session is ready for the next cell"
    )
    assert "Failed" not in page.all_text()
    assert panel.button.layout.display == "none"  # nothing runs: no Stop
