"""Job: a handle over its monitor (state, result, errors, diagnosis come from the monitor)."""

from __future__ import annotations

import base64
import threading

import cloudpickle
import pytest

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.store import CheckpointError
from jupyter_disttrain.job import Job
from jupyter_disttrain.results import JobFailed, JobStopped
from jupyter_disttrain.spec import JobSpec

T0 = 1_800_000_000.0


def job(name: str = "j", nodes: int = 1, nproc: int = 2) -> Job:
    return Job(JobSpec(name, nodes=nodes, nproc=nproc), LocalBackend())


def result_event(value: object, rank: int = 0) -> ev.Event:
    data = base64.b64encode(cloudpickle.dumps(value)).decode()
    return ev.Event("result", rank, T0 + 2, {"encoding": "cloudpickle+base64", "data": data})


def test_state_is_what_the_backend_reported_and_result_is_rank_zeros() -> None:
    j = job()
    assert j.status() == "Pending" and not j.done
    j.feed(ev.job_event("Running", "Started", "", t=T0))
    for rank in (0, 1):
        j.feed(ev.Event("done", rank, T0 + 1, {"seconds": 1.0}))
    assert j.monitor.state == "Succeeded"  # derived from the ranks
    assert j.status() == "Running" and not j.done  # the backend has not said so yet
    j.feed(result_event({"loss": 0.5}))
    j.feed(ev.job_event("Succeeded", "Completed", "2 ranks done", t=T0 + 3))
    assert j.wait(1) == "Succeeded" and j.done and j.reason == "2 ranks done"
    assert j.result() == {"loss": 0.5}


def test_wait_blocks_until_the_end_and_times_out_with_the_state() -> None:
    j = job("slow")
    with pytest.raises(TimeoutError, match="job slow still Pending"):
        j.wait(0.1)
    threading.Timer(0.2, j.feed, [ev.job_event("Stopped", "Stopped", "by user", t=T0)]).start()
    assert j.wait(5) == "Stopped"
    with pytest.raises(JobStopped, match="by user"):
        j.result()


def test_first_failing_ranks_exception_is_raised_with_its_rank() -> None:
    j = job()
    j.feed(
        ev.Event(
            "error",
            1,
            T0 + 2,
            {"type": "ValueError", "module": "builtins", "message": "late", "traceback": "tb late"},
        )
    )
    j.feed(
        ev.Event(
            "error",
            0,
            T0 + 1,
            {"type": "KeyError", "module": "builtins", "message": "'x'", "traceback": "tb first"},
        )
    )
    j.feed(ev.job_event("Failed", "RankFailed", "rank 0 failed", t=T0 + 3))
    assert [e["rank"] for e in j.errors()] == [0, 1]
    with pytest.raises(KeyError) as info:
        j.result()
    assert "rank 0" in str(info.value)
    assert j.diagnosis() is not None and "rank 0" in str(j.diagnosis())


def test_failure_without_an_error_line_is_job_failed() -> None:
    j = job()
    j.feed(ev.job_event("Failed", "AgentFailed", "node 0 agent exited with code 1", t=T0))
    with pytest.raises(JobFailed, match="node 0 agent exited"):
        j.result()
    assert j.diagnosis() == "the job failed: node 0 agent exited with code 1"


def test_diagnosis_reads_nccl_lines_as_they_arrive() -> None:
    j = job()
    assert j.diagnosis() is None
    line = "host1:71:90 [0] NCCL INFO Call to connect returned Connection refused, retrying"
    j.feed(ev.Event("log", 0, T0, {"text": line}))
    j.feed(
        ev.Event(
            "log",
            0,
            T0,
            {
                "text": "host1:71:90 [0] misc/socket.cc:484 NCCL WARN "
                "Net : Connect to 10.1.1.2<2345> failed : "
                "Connection refused"
            },
        )
    )
    assert j.diagnosis() == j.monitor.comms().diagnosis
    assert "refused" in str(j.diagnosis()).lower()


def test_checkpoint_dir_option_then_reported_then_backend_default() -> None:
    with_dir = Job(JobSpec("c1", checkpoint_dir="/data/run"), LocalBackend())
    assert with_dir.checkpoint_dir() == "/data/run"
    plain = job("c2")
    assert plain.checkpoint_dir().endswith("jobs/c2/checkpoints")
    plain.feed(ev.Event("checkpoint", 0, T0, {"step": 3, "uri": "s3://b/run/step-3.pt"}))
    assert plain.checkpoint_dir() == "s3://b/run"


def test_no_checkpoint_dir_when_nothing_says_where() -> None:
    from jupyter_disttrain.backends.kubernetes import KubernetesBackend

    k = Job(JobSpec("k", backend="kubernetes"), KubernetesBackend())
    with pytest.raises(CheckpointError, match="--checkpoint-dir"):
        k.checkpoint_dir()


def test_a_run_of_events_is_applied_at_once_then_every_listener_hears_each_in_order() -> None:
    j = job()
    heard: list[tuple[str, int | None, int]] = []

    def broken(event: ev.Event) -> None:
        raise RuntimeError("a display that fails")

    def listen(event: ev.Event) -> None:
        heard.append((event.kind, event.rank, len(j.monitor.metric_ranks("loss"))))

    j.add_listener(broken)
    j.add_listener(listen)
    metrics = [ev.Event("metric", r, T0 + r, {"step": 1, "values": {"loss": 1.0}}) for r in (0, 1)]
    j.sink.many(metrics)
    j.sink(ev.Event("done", 0, T0 + 3, {"seconds": 1.0}))
    # the monitor had both metrics before a listener heard the first: one line, one update
    assert heard == [("metric", 0, 2), ("metric", 1, 2), ("done", 0, 2)]
    assert j.monitor.version == 3
