"""Time to first step: the phase timeline over hand-written event sequences."""

from __future__ import annotations

import random

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.monitor import JobMonitor, format_text, summary, timeline, waiting_line
from jupyter_disttrain.monitor.phases import PhaseLog

T0 = 1_800_000_000.0
ALL = ev.PHASES
LOCAL = ("started", "rendezvous", "first_step")


def k8s_job(world: int = 4, nproc: int = 2) -> list[ev.Event]:
    """A Kueue-queued TrainJob of two pods: every phase, with known durations."""
    pods = [list(range(n * nproc, (n + 1) * nproc)) for n in range(world // nproc)]
    out = [
        ev.job_event("Pending", "Created", "TrainJob default/tj created", t=T0),
        ev.phase_event("queued", "waiting", None, "waiting for Kueue admission in team-a", T0),
        ev.job_event("Pending", "Queued", "waiting for Kueue admission in team-a", t=T0 + 0.1),
    ]
    for i, ranks in enumerate(pods):
        base = T0 + 5 + i * 0.5  # admitted after 5 s; the second pod half a second later
        out += [
            ev.phase_event("queued", "done", ranks, f"pod tj-{i} created", base),
            ev.phase_event("scheduled", "done", ranks, "Successfully assigned", base + 1),
            ev.phase_event("image", "waiting", ranks, f'pod tj-{i} pulling image "pt"', base + 1),
            ev.phase_event("image", "done", ranks, "pulled", base + 31),
            ev.phase_event("started", "done", ranks, "started", base + 32),
        ]
    out += [ev.Event("hello", r, T0 + 40 + r * 0.1, {"world_size": world}) for r in range(world)]
    out += [ev.Event("metric", r, T0 + 43, {"step": 0, "values": {"loss": 1.0}}) for r in range(4)]
    return out


def test_every_phase_of_a_kueue_queued_job_with_its_duration() -> None:
    line = timeline(k8s_job(), ALL, 4, now=T0 + 60)
    got = {r["name"]: (r["state"], r["duration_s"]) for r in line.rows}
    assert [r["name"] for r in line.rows] == list(ALL)
    assert got == {
        "queued": ("done", pytest.approx(5.5)),
        "scheduled": ("done", pytest.approx(1.0)),
        "image": ("done", pytest.approx(30.0)),
        "started": ("done", pytest.approx(1.0)),
        "rendezvous": ("done", pytest.approx(40.3 - 37.5)),
        "first_step": ("done", pytest.approx(43 - 40.3)),
    }
    assert line.current is None and line.first_step_s == pytest.approx(43.0)
    assert [r["label"] for r in line.rows][-1] == "first step"
    assert summary(line.rows).startswith("queued 5.5s · scheduled 1.0s · image 30.0s")
    assert waiting_line(line.rows, line.current) == ""


def test_the_order_events_arrive_in_does_not_matter() -> None:
    events = k8s_job()
    expected = timeline(events, ALL, 4, now=T0 + 60)
    random.Random(7).shuffle(events)
    assert timeline(events, ALL, 4, now=T0 + 60) == expected


def test_a_job_waiting_in_kueue_says_so() -> None:
    events = k8s_job()[:3]
    line = timeline(events, ALL, 4, now=T0 + 130)
    assert line.current == "queued"
    assert [r["state"] for r in line.rows] == ["active"] + ["pending"] * 5
    assert line.rows[0]["duration_s"] == pytest.approx(130.0) and line.first_step_s is None
    assert waiting_line(line.rows, line.current) == (
        "waiting 2m10s in: queue (waiting for Kueue admission in team-a)"
    )


def test_a_job_stuck_in_image_pull_names_the_ranks_and_the_image() -> None:
    events = [
        e
        for e in k8s_job()
        if not (
            e.kind == "phase"
            and e.get("ranks") == [2, 3]
            and e.get("phase") in ("image", "started")
            and e.get("state") == "done"
        )
    ]
    events = [e for e in events if e.kind != "metric" and (e.kind != "hello" or e.rank in (0, 1))]
    events.append(ev.phase_event("image", "waiting", [2, 3], 'pod tj-1 pulling image "pt"', T0 + 9))
    line = timeline(events, ALL, 4, now=T0 + 5.5 + 1 + 130)
    assert line.current == "image"
    rows = {r["name"]: r for r in line.rows}
    assert rows["scheduled"]["state"] == "done" and rows["started"]["state"] == "pending"
    assert rows["image"]["detail"] == 'ranks 2-3: pod tj-1 pulling image "pt"'
    assert waiting_line(line.rows, line.current) == (
        'waiting 2m10s in: image pull (ranks 2-3: pod tj-1 pulling image "pt")'
    )


def test_a_rendezvous_waiting_for_one_rank_counts_the_ranks_up() -> None:
    events = [e for e in k8s_job() if e.kind != "metric" and (e.kind != "hello" or e.rank != 3)]
    line = timeline(events, ALL, 4, now=T0 + 50)
    assert line.current == "rendezvous"
    assert line.rows[4]["detail"] == "3 of 4 ranks up, waiting for rank 3"


def test_a_hello_proves_the_earlier_phases_when_backend_facts_are_missing() -> None:
    events = [e for e in k8s_job() if e.kind != "phase" or e.get("ranks") != [2, 3]]
    line = timeline(events, ALL, 4, now=T0 + 60)
    assert all(r["state"] == "done" for r in line.rows), line.rows
    assert line.rows[1]["ended"] == pytest.approx(T0 + 40.2)  # rank 2's hello


def test_a_job_that_failed_before_its_first_step_keeps_the_phase_it_was_in() -> None:
    events = [e for e in k8s_job() if e.kind != "metric"]
    events.append(ev.job_event("Failed", "WorkerFailed", "rank 1: boom", t=T0 + 45))
    line = timeline(events, ALL, 4, now=T0 + 100)
    last = line.rows[-1]
    assert (last["state"], last["ended"], last["duration_s"]) == (
        "active",
        T0 + 45,
        pytest.approx(4.7),
    )
    assert line.current is None and waiting_line(line.rows, line.current) == ""


def test_a_local_job_shows_only_what_the_local_backend_observes() -> None:
    events = [ev.job_event("Pending", "Submitted", "2 ranks", t=T0)]
    events += [ev.phase_event("started", "done", [r], "", T0 + 0.2 + r / 10) for r in range(2)]
    line = timeline(events, LOCAL, 2, now=T0 + 3)
    assert [r["name"] for r in line.rows] == list(LOCAL)
    assert line.current == "rendezvous"
    assert line.rows[0]["duration_s"] == pytest.approx(0.3)
    assert waiting_line(line.rows, line.current) == (
        "waiting 2.7s in: rendezvous (0 of 2 ranks up, waiting for ranks 0-1)"
    )
    events += [ev.Event("hello", r, T0 + 4, {}) for r in range(2)]
    line = timeline(events, LOCAL, 2, now=T0 + 5)
    assert line.current == "first_step" and line.rows[2]["detail"] == "no report() yet"
    assert timeline([], LOCAL, 2, now=T0).rows[0]["state"] == "pending"
    assert timeline(events, (), 2, now=T0).rows == []


def test_the_monitor_snapshot_carries_the_timeline_and_keeps_few_events() -> None:
    mon = JobMonitor("tj", "kubernetes", 4, nodes=2, nproc=2, phases=ALL)
    mon.feed_many(k8s_job())
    for step in range(1, 500):
        mon.feed(ev.Event("metric", 0, T0 + 43 + step, {"step": step, "values": {"loss": 1.0}}))
        mon.feed(ev.Event("log", 0, T0 + 43 + step, {"text": "x"}))
    snap = mon.snapshot(now=T0 + 600)
    assert snap["phase"] is None and snap["first_step_s"] == pytest.approx(43.0)
    assert [p["state"] for p in snap["phases"]] == ["done"] * 6
    log = PhaseLog()
    for event in mon_events(k8s_job()):
        log.add(event)
    assert len(log.events) == len(k8s_job()) - 4  # metrics apart: only the earliest is kept
    assert JobMonitor("j", "local", 1).snapshot()["phases"] == []


def test_the_first_step_is_the_earliest_report_whatever_order_the_ranks_lines_arrive_in() -> None:
    """A job followed live and the same job replayed from its records (the ranks' lines read
    in another order) read the same first step."""
    early = ev.Event("metric", 3, T0 + 42.5, {"step": 0, "values": {"loss": 1.0}})
    arrivals = [k8s_job(), [*k8s_job(), early], [*k8s_job()[:-4], early, *k8s_job()[-4:]]]
    lines = []
    for events in arrivals[1:]:
        log = PhaseLog()
        for event in events:
            log.add(event)
        lines.append(log.timeline(ALL, 4, T0 + 60))
    assert lines[0] == lines[1]
    assert lines[0].first_step_s == pytest.approx(42.5)
    assert lines[0].rows[-1]["ended"] == pytest.approx(T0 + 42.5)
    log = PhaseLog()
    for event in arrivals[0]:
        log.add(event)
    before = log.timeline(ALL, 4, T0 + 60)
    log.add(early)  # a finished timeline is not reused once an earlier report arrived
    assert log.timeline(ALL, 4, T0 + 60) == lines[0] != before


def mon_events(events: list[ev.Event]) -> list[ev.Event]:
    return [*events, ev.Event("log", 0, T0 + 50, {"text": "x"}), *events[-4:]]


def test_the_text_view_shows_the_phases_and_what_a_waiting_job_waits_for() -> None:
    mon = JobMonitor("j", "local", 2, nodes=2, nproc=1, phases=LOCAL)
    mon.feed(ev.job_event("Pending", "Submitted", "2 ranks", t=T0))
    mon.feed(ev.phase_event("started", "done", [1], "", T0 + 1.5))
    text = format_text(mon.snapshot(now=T0 + 2))
    assert "\n  waiting 2.0s in: worker start (rank 0 not started yet)\n" in text, text
    mon.feed(ev.phase_event("started", "done", [0], "", T0 + 2.5))
    mon.feed_many([ev.Event("hello", r, T0 + 3, {}) for r in range(2)])
    mon.feed(ev.Event("metric", 0, T0 + 4.25, {"step": 0, "values": {}}))
    text = format_text(mon.snapshot(now=T0 + 5))
    assert "\n  started 2.5s · rendezvous 0.5s · first step 1.2s (time to first step 4.2s)\n" in (
        text
    ), text


def test_a_job_that_succeeded_without_the_facts_leaves_unseen_phases_pending() -> None:
    events = [*k8s_job()[:3], ev.job_event("Succeeded", "Succeeded", "", t=T0 + 90)]
    line = timeline(events, ALL, 4, now=T0 + 100)
    assert [r["state"] for r in line.rows] == ["pending"] * 6 and line.current is None
    no_report = [e for e in k8s_job() if e.kind != "metric"]
    no_report.append(ev.job_event("Succeeded", "Succeeded", "", t=T0 + 90))
    line = timeline(no_report, ALL, 4, now=T0 + 100)
    assert [r["state"] for r in line.rows] == ["done"] * 5 + ["pending"]
    assert summary(line.rows).endswith("rendezvous 2.8s")


def test_the_lines_view_prints_what_a_job_waits_for() -> None:
    from jupyter_disttrain.textview import format_event

    waiting = ev.phase_event("image", "waiting", [2, 3], 'pod tj-1 pulling image "pt"', T0)
    assert format_event(waiting) == 'waiting (image): pod tj-1 pulling image "pt"'
    assert format_event(ev.phase_event("image", "done", [2, 3], "pulled", T0)) is None


def test_a_finished_timeline_is_reused_and_an_active_one_follows_the_clock() -> None:
    log = PhaseLog()
    for event in k8s_job()[:3]:
        log.add(event)
    assert log.timeline(ALL, 4, T0 + 10).rows[0]["duration_s"] == pytest.approx(10.0)
    assert log.timeline(ALL, 4, T0 + 20).rows[0]["duration_s"] == pytest.approx(20.0)
    for event in k8s_job()[3:]:
        log.add(event)
    first = log.timeline(ALL, 4, T0 + 60)
    first.rows[0]["label"] = "changed by a reader"
    again = log.timeline(ALL, 4, T0 + 90)
    assert again.rows[0]["label"] == "queued" and again.first_step_s == first.first_step_s
