"""The header's start-up timeline: phases with durations, the current one highlighted."""

from __future__ import annotations

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.widgets.header import header_html
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
