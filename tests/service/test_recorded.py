"""A job's view record: written by its follower, believed only when signed, owned and well
formed; the server shows a recorded job without reading its lines, and records a job
nobody followed to its end."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.options import add_job_options
from jupyter_disttrain.service import JobService, recorded
from jupyter_disttrain.service.following import Followers
from tests.server.jobdirs import write_job
from tests.signing import KEY


@pytest.fixture
def job_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DISTRAIN_HOME", str(home))
    return home


def finished_monitor(name: str = "rec") -> JobMonitor:
    monitor = JobMonitor(name, "local", 2, nodes=1, nproc=2)
    monitor.feed(ev.job_event("Running", "Started", "ok", t=10.0))
    for rank in (0, 1):
        monitor.feed(ev.Event("metric", rank, 11.0, {"step": 3, "values": {"loss": 0.5 + rank}}))
    monitor.feed(ev.job_event("Succeeded", "Succeeded", "2 ranks done", t=12.0))
    return monitor


def private_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "job"
    directory.mkdir(mode=0o700)
    return directory


def test_a_record_reads_back_as_the_snapshot_it_was_written_from(tmp_path: Path) -> None:
    path = private_dir(tmp_path) / recorded.VIEW_FILE
    snapshot = finished_monitor().snapshot(20.0)
    recorded.write_record(path, KEY, snapshot)
    assert recorded.read_record(path, KEY) == json.loads(json.dumps(snapshot))
    assert path.stat().st_mode & 0o777 == 0o600
    assert recorded.read_record(path.with_name("none.json"), KEY) is None


def test_a_record_not_signed_owned_or_formed_is_not_believed(tmp_path: Path) -> None:
    path = private_dir(tmp_path) / recorded.VIEW_FILE
    snapshot = finished_monitor().snapshot(20.0)
    recorded.write_record(path, bytes(32), snapshot)  # another job's key
    with pytest.raises(recorded.RecordError, match="not signed with the job's key"):
        recorded.read_record(path, KEY)

    recorded.write_record(path, KEY, snapshot)
    mac, _, body = path.read_bytes().partition(b"\n")
    path.write_bytes(mac + b"\n" + body.replace(b'"Succeeded"', b'"Failed"', 1))  # edited
    with pytest.raises(recorded.RecordError, match="not signed"):
        recorded.read_record(path, KEY)

    bad = dict(snapshot, step="3")  # signed with the key, but a field of the wrong type
    recorded.write_record(path, KEY, bad)  # type: ignore[arg-type]
    with pytest.raises(recorded.RecordError, match=r"snapshot.step: '3' is none of"):
        recorded.read_record(path, KEY)

    recorded.write_record(path, KEY, snapshot)
    path.chmod(0o620)  # another user of the group could have written it
    with pytest.raises(recorded.RecordError, match="writable by other users"):
        recorded.read_record(path, KEY)
    path.chmod(0o600)
    path.parent.chmod(0o770)
    with pytest.raises(recorded.RecordError, match="writable by other users"):
        recorded.read_record(path, KEY)


def test_the_server_shows_a_recorded_job_without_reading_its_lines(job_home: Path) -> None:
    directory = write_job("recorded", steps=5)
    monitor = JobMonitor("recorded", "local", 4, nodes=2, nproc=2)
    backend = LocalBackend()
    (record,) = backend.list_jobs()
    _, replay = backend.attach("recorded", monitor.feed)  # the job's follower, elsewhere
    assert replay.join(30), "the replay of the recorded job did not end"
    recorded.write_record(directory / recorded.VIEW_FILE, KEY, monitor.snapshot())
    for log in jobdir.logs_dir(directory).iterdir():  # no line left to read again
        log.write_text("")
    (directory / "events.jsonl").write_text("")

    followers = Followers()
    try:
        assert followers.follow(backend, record) is None  # nothing to replay
        view = followers.monitor("local", "recorded")
        assert isinstance(view, recorded.RecordedView)
        shown = view.snapshot()
        assert (shown["state"], shown["step"], len(shown["ranks"])) == ("Succeeded", 4, 4)
    finally:
        followers.close()


def test_a_job_nobody_followed_to_its_end_is_recorded_by_its_first_reader(
    job_home: Path,
) -> None:
    # its kernel died while it ran: state.json says Running, its owner is gone
    directory = write_job("orphan", state="Running", steps=3, owner_pid=2**22 + 1)
    backend = LocalBackend()
    (record,) = backend.list_jobs()
    assert record.state == "Stopped"
    (directory / recorded.VIEW_FILE).write_bytes(b"0" * 64 + b"\n{}")  # not to be believed

    first = Followers()
    try:
        replay = first.follow(backend, record)
        assert replay is not None and replay.join(30), "the replay did not end"
        replayed = first.monitor("local", "orphan")
        assert isinstance(replayed, JobMonitor)
        assert replayed.snapshot()["step"] == 2
    finally:
        first.close()

    written = recorded.read_record(directory / recorded.VIEW_FILE, KEY)
    assert written is not None and (written["state"], written["step"]) == ("Stopped", 2)
    again = Followers()  # the next server process
    try:
        assert again.follow(backend, record) is None
        view = again.monitor("local", "orphan")
        assert isinstance(view, recorded.RecordedView) and view.snapshot()["step"] == 2
    finally:
        again.close()


def test_a_stale_record_of_a_job_that_ended_is_followed_again(job_home: Path) -> None:
    directory = write_job("late", state="Succeeded", steps=2)
    running = JobMonitor("late", "local", 4, nodes=2, nproc=2)
    running.feed(ev.job_event("Running", "Started", "ok"))
    recorded.write_record(directory / recorded.VIEW_FILE, KEY, running.snapshot())
    backend = LocalBackend()
    (record,) = backend.list_jobs()
    view = recorded.RecordedView.open(backend, "late")
    assert view is not None and not view.current(record.state)
    assert view.current("Running")

    followers = Followers()
    try:
        replay = followers.follow(backend, record)  # its end replayed here, then recorded
        assert replay is not None and replay.join(30), "the replay did not end"
    finally:
        followers.close()
    assert view.snapshot()["state"] == "Succeeded"


def test_a_job_run_here_is_recorded_while_it_runs_and_at_its_end(home: Path) -> None:
    service = JobService()
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    spec = service.spec(parser.parse_args(["--name", "view-rec"]))
    job = service.run(service.plan(spec, "6 * 7"))
    assert job.wait(120) == "Succeeded", job.logs()  # the final record written by then
    assert job.plan is not None
    path = Path(LocalBackend().job_directory("view-rec")) / recorded.VIEW_FILE
    found = recorded.read_record(path, job.plan.payload.key)
    assert found is not None, job.logs()
    assert found["state"] == "Succeeded" and found["has_result"], found
    assert found["ranks"] and all(r["state"] == "Succeeded" for r in found["ranks"])
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_the_recorder_keeps_the_record_fresh_while_the_job_runs(tmp_path: Path) -> None:
    path = private_dir(tmp_path) / recorded.VIEW_FILE
    monitor = JobMonitor("live", "local", 2, nodes=1, nproc=2)
    monitor.feed(ev.job_event("Running", "Started", "ok"))
    recorder = recorded.Recorder(monitor, path, KEY)
    recorder.start()
    view = recorded.RecordedView(path, KEY)

    def shows(step: int) -> bool:
        try:
            return view.snapshot()["step"] == step
        except recorded.RecordError:  # not written yet
            return False

    for step in (1, 2):
        monitor.feed(ev.Event("metric", 0, time.time(), {"step": step, "values": {"loss": 1.0}}))
        deadline = time.monotonic() + 30
        while not shows(step) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shows(step), f"the record did not show step {step}: {path.read_bytes()[:300]!r}"
    assert view.current("Running") and not view.current("Succeeded")
    end = ev.job_event("Succeeded", "Succeeded", "done")
    monitor.feed(end)
    recorder.on_event(end)
    assert recorder.close(30), "the final record was not written"
    assert view.snapshot()["state"] == "Succeeded" and view.current("Succeeded")
    assert not recorder.error


def test_a_running_jobs_record_is_current_only_while_its_follower_writes_it(
    tmp_path: Path,
) -> None:
    path = private_dir(tmp_path) / recorded.VIEW_FILE
    running = JobMonitor("live", "kubernetes", 2, nodes=2, nproc=1)
    running.feed(ev.job_event("Running", "Started", "ok", t=10.0))
    recorded.write_record(path, KEY, running.snapshot(11.0))
    view = recorded.RecordedView(path, KEY)
    later = time.time() + recorded.STALE_SECONDS + 1  # its kernel died, the job runs on
    assert view.current("Running") and not view.current("Running", now=later)
    assert not view.current("Succeeded")  # listed as ended: the record is behind
    recorded.write_record(path, KEY, finished_monitor("live").snapshot(20.0))
    assert view.current("Succeeded", now=later) and view.current("Running", now=later)


def test_a_job_followed_here_is_shown_from_its_record_once_its_follower_writes_one(
    job_home: Path,
) -> None:
    directory = write_job("racing", state="Running", steps=3, owner_pid=os.getpid())
    backend = LocalBackend()
    (record,) = backend.list_jobs()
    assert record.state == "Running"
    followers = Followers()  # the server began following before the kernel recorded
    try:
        replay = followers.follow(backend, record)
        assert replay is not None
        assert isinstance(followers.monitor("local", "racing"), JobMonitor)
        running = JobMonitor("racing", "local", 4, nodes=2, nproc=2)
        running.feed(ev.job_event("Running", "Started", "ok", t=time.time()))
        recorded.write_record(directory / recorded.VIEW_FILE, KEY, running.snapshot())
        followers.prune(backend, backend.list_jobs())
        view = followers.monitor("local", "racing")
        assert isinstance(view, recorded.RecordedView), view
        assert replay.join(10), "the follower here was not detached"
    finally:
        followers.close()


def test_a_slow_write_spaces_the_next_one_but_never_past_what_readers_believe() -> None:
    assert recorded.write_pause(0.001) == recorded.RECORD_SECONDS
    assert recorded.write_pause(0.1) == pytest.approx(0.1 / recorded.WRITE_SHARE)
    # a record of many ranks on a loaded machine: still rewritten well before it goes stale
    assert recorded.write_pause(5.0) == recorded.STALE_SECONDS / 3


def test_a_write_that_waited_without_working_does_not_space_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel busy at a job's start keeps the writer from the GIL or a CPU: its write
    takes long on the clock, not in work. Spaced by the clock, the next write came
    0.3 / WRITE_SHARE = 15 s later, and the sidebar showed no step for that long."""
    path = private_dir(tmp_path) / recorded.VIEW_FILE
    written: list[float] = []
    write = recorded.write_record

    def waits_then_writes(*args: Any) -> None:
        time.sleep(0.3)
        write(*args)
        written.append(time.monotonic())

    monkeypatch.setattr(recorded, "write_record", waits_then_writes)
    monitor = JobMonitor("busy", "local", 2, nodes=1, nproc=2)
    monitor.feed(ev.job_event("Running", "Started", "ok"))
    recorder = recorded.Recorder(monitor, path, KEY)
    recorder.start()
    try:
        deadline = time.monotonic() + 8
        while len(written) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        gaps = [b - a for a, b in itertools.pairwise(written)]
        assert len(written) >= 3, f"writes at {written}: spaced by their wall time"
        assert max(gaps) < 0.3 / recorded.WRITE_SHARE / 2, gaps
    finally:
        recorder.retire()
