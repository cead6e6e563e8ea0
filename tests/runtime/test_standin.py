"""The stand-in ranks (runtime/standin.py) on the emulator: every rank's state reaches the
notebook's monitor through node 0's log, failing ranks and hung nodes are named, and the
notebook's API connections stay fixed whatever the number of pods."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.events import Event
from jupyter_disttrain.job import Job
from jupyter_disttrain.monitor.scale import slow_sentence
from jupyter_disttrain.runtime.standin_script import HANG_LINE, Script, stacks_for
from jupyter_disttrain.service import JobService
from tests.k8s_emulator.emulator import Emulator
from tests.scale_harness import create_standin_job
from tests.waiting import wait_for


# --- the script (pure) ---------------------------------------------------------------------
def test_script_steps_stragglers_slower() -> None:
    script = Script(nodes=2, nproc=4, step_seconds=1.0, stragglers=(5,), slow=2.0)
    assert script.due_step(0, 10.0) == 10
    assert script.due_step(5, 10.0) == 4  # offset 5/97 s, then 2 s a step
    assert script.values(5, 3)["step_time"] == 2.0


def test_script_faults() -> None:
    script = Script(nodes=4, nproc=2, fail_rank=3, fail_step=5, hang_node=2, hang_step=7)
    assert script.verdict(3, 5) == "raise"
    assert script.verdict(0, 5) == "step"
    assert script.verdict(0, 6) == "wait"
    assert script.verdict(4, 4) == "step"
    lost = Script(nodes=4, nproc=2, lost_node=1, lost_step=2)
    assert [lost.verdict(2, s) for s in (1, 2)] == ["step", "lost"]
    assert lost.verdict(0, 9) == "step"
    assert stacks_for(Script(nodes=3, nproc=2, hang_node=1), 2)["threads"][0]["cell_line"] == (
        HANG_LINE
    )


def test_script_refuses_ranks_outside_the_job() -> None:
    with pytest.raises(ValueError, match="--fail-rank 16 is not a rank of 16"):
        Script(nodes=2, nproc=8, fail_rank=16)
    with pytest.raises(ValueError, match=r"--hang-node 0 must be a node of 1\.\.1"):
        Script(nodes=2, nproc=8, hang_node=0)


# --- on the emulator ---------------------------------------------------------------------------
Follow = Callable[..., tuple[Job, Emulator]]


@pytest.fixture
def follow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Follow]:
    """Start an emulator and follow the stand-in job created on it; stops both after."""
    service = JobService()
    made: list[Emulator] = []

    def start(kind: str, nodes: int, nproc: int = 8, **script: object) -> tuple[Job, Emulator]:
        emulator = Emulator(apis=("trainer",) if kind == "trainjob" else ("kubeflow-v1",))
        made.append(emulator.start())
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        create_standin_job(emulator, "scale", kind, nodes, nproc, **script)
        emulator.reset_stats()
        return service.attach("scale", KubernetesBackend()), emulator

    yield start
    service.stop_all(timeout=10)
    for emulator in made:
        emulator.stop()


def tail(job: Job) -> str:
    return "\n".join(line.text for line in job.monitor.log_lines(limit=20))


def wait_until(job: Job, what: str, ok: Callable[[], bool], timeout: float = 240.0) -> None:
    """:func:`tests.waiting.wait_for` of ``ok``, the job's state and last lines on a timeout
    (read twice a second: a check reads every rank of a thousand-node job)."""

    def state() -> str:
        return f"{what}; {job.status()} ({job.reason})\n{tail(job)}"

    wait_for(ok, timeout, state, interval=0.5)


def test_128_nodes_every_rank_heard_stragglers_and_the_failing_rank_named(
    follow: Follow,
) -> None:
    nodes, nproc = 128, 8
    job, emulator = follow(
        "trainjob",
        nodes,
        nproc,
        steps=25,
        step_seconds=1.0,
        stragglers=(517, 700, 901),
        fail_rank=777,
        fail_step=15,
    )
    monitor = job.monitor
    slow: list[str] = []  # what the monitor said of the stragglers, as of their 5th step

    def straggling(event: Event) -> None:  # on the follower's thread, right after the monitor
        if event.kind == "metric" and event.rank == 901 and event.get("step") == 4 and not slow:
            slow.append(slow_sentence(monitor.slow(now=event.t), nodes=True))

    job.add_listener(straggling)
    wait_until(job, "every rank's metrics", lambda: len(monitor.metric_ranks("loss")) == 1024)
    last_start = latest_container_start(emulator, nodes)
    first_metric = float(min(monitor.metrics_columns()["t"]))
    assert first_metric >= last_start, (  # the rendezvous waited for every node's pod
        f"a rank stepped {last_start - first_metric:.1f} s before the last pod started"
    )
    state = job.wait(timeout=240)
    assert slow == [
        "ranks 517, 700, 901 (nodes 64, 87, 112) are 1.8x slower per step than the median"
    ], (slow, tail(job))
    assert state == "Failed", (state, job.reason, tail(job))
    failure = monitor.first_failure()
    assert failure is not None and failure[0] == 777, (failure, job.reason, tail(job))
    assert "loss became nan at step 15" in failure[1], failure
    stats = emulator.stats()
    assert stats.streams.peak <= 5, (stats.streams.peak, stats.requests)
    assert stats.log_follows.peak <= 1, stats.requests  # node 0's log only


def latest_container_start(emulator: Emulator, nodes: int) -> float:
    """When the last of the job's ``nodes`` containers started (the API's second resolution)."""
    from kubernetes import client as k8s

    pods = k8s.CoreV1Api(emulator.api_client()).list_namespaced_pod("default").items
    starts = []
    for pod in pods:
        state = pod.status.container_statuses[0].state
        started = state.running or state.terminated
        assert started is not None, (pod.metadata.name, state)
        starts.append(started.started_at.timestamp())
    assert len(starts) == nodes, [pod.metadata.name for pod in pods]
    return max(starts)


def test_a_hung_node_is_named(follow: Follow) -> None:
    job, emulator = follow(
        "pytorchjob",
        16,
        4,
        hang_after=3.0,
        steps=200,
        step_seconds=0.5,
        hang_node=5,
        hang_step=6,
    )
    wait_until(job, "the hang's stacks", lambda: job.monitor.hang() is not None, timeout=180)
    hang = job.monitor.hang()
    assert hang is not None
    assert hang.odd == tuple(range(20, 24)), (hang.sentence, tail(job))
    assert emulator.stats().streams.peak <= 5
