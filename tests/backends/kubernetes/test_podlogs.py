"""A job's pod logs as a user reads them (backends/kubernetes/podlogs.py).

A failed rank's signed error shows as its traceback in ``disttrain logs``: from the
rank's own pod log, or relayed through node 0's log when its own holds none.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import cli
from jupyter_disttrain import events as ev
from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend, podlogs
from jupyter_disttrain.backends.kubernetes.client import connect
from jupyter_disttrain.backends.kubernetes.logs import logs_name
from jupyter_disttrain.backends.kubernetes.podlogs import job_texts, rank_lines, run_lines
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.signing import KEY, line, trust
from tests.waiting import wait_for

TRACE = 'Traceback (most recent call last):\n  File "train.py", line 4\nValueError: bad batch\n'


def error(rank: int) -> str:
    return line(
        "error", rank, type="ValueError", module="builtins", message="bad batch", traceback=TRACE
    )


class Container:
    """A container's runs' logs as the log API serves them (current and previous); after
    read number N (from 0) it restarts ``restarts_after[N]`` times."""

    def __init__(
        self, runs: int, restarts_after: dict[int, int] | None = None, gone: bool = False
    ) -> None:
        self.restarts = runs - 1
        self.restarts_after = restarts_after or {}
        self.gone = gone
        self.reads = 0

    def read(self, previous: bool) -> list[str]:
        run = self.restarts - int(previous)
        self.restarts += self.restarts_after.get(self.reads, 0)
        self.reads += 1
        return [f"run {run}"]

    def count(self) -> int | None:
        return None if self.gone else self.restarts


def test_a_run_is_read_from_the_current_log_while_the_container_has_not_restarted() -> None:
    container = Container(runs=1)
    assert run_lines(container.read, container.count, 0) == ["run 0"]
    assert container.reads == 1


def test_a_container_that_restarted_gives_its_previous_log_first() -> None:
    container = Container(runs=2)  # the watch saw run 0 end; the kubelet restarted it since
    assert run_lines(container.read, container.count, 0) == ["run 0", "run 1"]
    container = Container(runs=1, restarts_after={0: 1})  # it restarted right after the read
    assert run_lines(container.read, container.count, 0) == ["run 0"]  # that run, once
    assert container.reads == 2


def test_two_runs_are_read_in_one_go_each_once() -> None:
    container = Container(runs=2)  # first seen failed with a restart: runs 0 and 1 failed
    assert run_lines(container.read, container.count, 0, 1) == ["run 0", "run 1"]
    container = Container(runs=2, restarts_after={0: 1})  # restarted again after the read
    assert run_lines(container.read, container.count, 0, 1) == ["run 1"]  # run 0 is gone
    container = Container(runs=3)  # restarted again before it: only the run after is read
    assert run_lines(container.read, container.count, 0, 1) == ["run 1", "run 2"]


def test_a_run_two_restarts_back_is_gone_and_what_was_read_is_kept() -> None:
    container = Container(runs=3)
    assert run_lines(container.read, container.count, 0) == ["run 2"]
    container = Container(runs=1, restarts_after={0: 2})  # twice right after the read
    assert run_lines(container.read, container.count, 0) == ["run 0"]


def test_a_pod_gone_after_its_read_keeps_what_was_read() -> None:
    container = Container(runs=1, gone=True)
    assert run_lines(container.read, container.count, 0) == ["run 0"]


def test_an_error_relayed_through_node_zero_shows_as_the_failing_ranks_traceback() -> None:
    texts = {"job-node-0": f"[rank 0] step 1\n[rank 0] {error(1)}", "job-node-1": "[rank 1] hi"}
    shown = rank_lines(texts, trust(nodes=2, nproc=1), None, None).splitlines()
    relayed = [f"[rank 1] {t}" for t in TRACE.splitlines()]
    assert shown == ["[rank 0] step 1", *relayed, "[rank 1] hi"], shown
    assert rank_lines(texts, trust(nodes=2, nproc=1), 1, None).splitlines() == [
        *TRACE.splitlines(),
        "hi",
    ]
    assert rank_lines(texts, trust(nodes=2, nproc=1), 0, None) == "step 1"


def test_an_error_in_the_ranks_own_log_is_shown_once_not_again_as_relayed() -> None:
    texts = {"job-node-0": f"[rank 0] {error(1)}", "job-node-1": f"[rank 1] {error(1)}"}
    shown = rank_lines(texts, trust(nodes=2, nproc=1), None, None).splitlines()
    assert shown == [f"[rank 1] {t}" for t in TRACE.splitlines()], shown


def test_an_error_line_not_believed_is_no_traceback() -> None:
    forged = ev.Trust.of(bytes(reversed(KEY)), 2, 1)
    printed = f"[rank 0] {error(1)}"
    assert rank_lines({"job-node-0": printed}, forged, None, None) == printed
    beyond = {"job-node-0": f"[rank 0] {error(5)}"}  # rank 5 of a 2-rank job
    assert rank_lines(beyond, trust(nodes=2, nproc=1), None, None) == ""
    other = {"job-node-1": f"[rank 1] {error(0)}"}  # node 1 may not speak for rank 0
    assert rank_lines(other, trust(nodes=2, nproc=1), None, None) == ""


def test_a_bar_two_ranks_of_a_pod_redraw_reads_as_each_ranks_last_redraw() -> None:
    """A redraw after a redraw of the same rank (the pod's ranks share its log) takes its
    place; the signed lines between them are left out, a plain line ends the bar."""
    bars = [f"[rank {r}] \r{i}%|" for i in (10, 20) for r in (0, 1)]
    control = f"[rank 0] {line('metric', 0, step=1, values={'loss': 1.0})}"
    text = "\n".join([bars[0], control, bars[1], bars[2], control, bars[3], "[rank 0] done", ""])
    shown = rank_lines({"job-node-0": text}, trust(nodes=1, nproc=2), None, None)
    assert shown.splitlines() == ["[rank 0] 20%|", "[rank 1] 20%|", "[rank 0] done"], shown
    assert rank_lines({"job-node-0": text}, trust(nodes=1, nproc=2), 1, None) == "20%|"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """An emulated cluster; the default kubeconfig points at it."""
    env = {"GLOO_SOCKET_IFNAME": pod_interface(), "NCCL_SOCKET_IFNAME": pod_interface()}
    with Emulator(env=env) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


#: Rank 1 raises having printed nothing of it; rank 0 would sleep on.
FAILING = textwrap.dedent(
    """
    import time, torch.distributed as dist
    print("rank", dist.get_rank(), "up", flush=True)
    if dist.get_rank() == 1:
        raise ValueError("bad shard on rank 1")
    time.sleep(300)
    """
)


@pytest.mark.slow
def test_disttrain_logs_of_a_failed_job_show_the_failing_ranks_traceback(
    cluster: Emulator, capsys: Any
) -> None:
    name = "k8s-logs-fail"
    spec = JobSpec(name, backend="kubernetes", nodes=2, timeout=240)
    job = jobs.submit(spec, build_payload(FAILING, {}, job=name), KubernetesBackend())
    assert job.wait(180) == "Failed", job.reason
    capsys.readouterr()
    assert cli.main(["logs", name, "--backend", "kubernetes"]) == 0
    logs = capsys.readouterr().out
    assert "[rank 1] Traceback (most recent call last):" in logs, logs
    assert "[rank 1] ValueError: bad shard on rank 1" in logs, logs
    assert logs.count("[rank 1] Traceback (most recent call last):") == 1, logs
    assert "[rank 1] rank 1 up" in logs and "##distrain" not in logs, logs
    own = job.logs(rank=1).splitlines()
    trace = own.index("Traceback (most recent call last):")
    assert own.index("rank 1 up") < trace < own.index("ValueError: bad shard on rank 1"), own
    assert "Traceback (most recent call last):" not in job.logs(rank=0), job.logs()
    assert KubernetesBackend().stop(name)
    wait_for(lambda: not cluster.processes(), 60, cluster.processes)


def bare_pod(job: str, pod: str, says: str) -> dict[str, Any]:
    """A pod of PyTorchJob ``job`` (by its label) that prints ``says`` and sleeps."""
    script = f"import time; print({says!r}, flush=True); time.sleep(300)"
    return {
        "metadata": {"name": pod, "labels": {"training.kubeflow.org/job-name": job}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "pytorch", "image": "python", "command": ["python", "-c", script]}
            ],
        },
    }


def test_a_failed_jobs_logs_kept_while_its_pods_were_read_are_the_ones_read(
    cluster: Emulator,
) -> None:
    """The job's follower keeps its logs, then deletes its pods, between this reader's
    look for kept logs and its read of the pods: the pod deleted reads as an empty log, so
    the kept logs (which hold its failing rank's error) are what the job's pods said."""
    conn = connect()
    pods = {"race-master-0": "node 0 up", "race-worker-0": "node 1 raised"}
    for pod, says in pods.items():
        conn.core.create_namespaced_pod(conn.namespace, bare_pod("race", pod, says))
    for pod, says in pods.items():
        wait_for(
            lambda pod=pod, says=says: (
                says in "".join(podlogs.stream_log(conn, pod, "pytorch", follow=False))
            ),
            60,
        )
    kept = {pod: f"kept: {says}" for pod, says in pods.items()}
    picked: list[str] = []

    def keep_then_delete(pod: Any) -> bool:  # what the follower does as the pods are listed
        if not picked:
            record = {"metadata": {"name": logs_name("race")}, "data": kept}
            conn.core.create_namespaced_config_map(conn.namespace, record)
            conn.core.delete_namespaced_pod("race-worker-0", conn.namespace, grace_period_seconds=0)
        picked.append(str(pod.metadata.name))
        return True

    assert job_texts(conn, "race", keep_then_delete) == kept, picked
    assert sorted(picked) == sorted(pods)  # both pods were listed, then one went
    conn.core.delete_namespaced_pod("race-master-0", conn.namespace, grace_period_seconds=0)
    wait_for(lambda: not cluster.processes(), 60, cluster.processes)


def test_a_log_read_the_api_server_does_not_answer_is_given_up_naming_the_pod(
    cluster: Emulator,
) -> None:
    """A read that does not follow gives up when the API server sends nothing for its
    time-out (a failed pod's events wait for that read), and says which pod's log it was;
    so does the read of its restart count; once the server answers again, both read as
    before."""
    conn = connect()
    conn.core.create_namespaced_pod(conn.namespace, bare_pod("mute", "mute-master-0", "up"))

    def log(**options: Any) -> str:
        return "".join(podlogs.stream_log(conn, "mute-master-0", "pytorch", **options))

    wait_for(lambda: "up" in log(follow=False), 60)
    cluster.slow_down(30, resources=["pods/log"], names="mute-master-0")
    started = time.monotonic()
    with pytest.raises(
        podlogs.LogReadTimeout, match="nothing of pod mute-master-0's log for 1 s a try"
    ):
        log(follow=False, read_timeout=1.0)
    assert time.monotonic() - started < 20  # four tries of 1 s (urllib3 tries three more)
    cluster.slow_down(30, verbs=["get"], resources=["pods"], names="mute-master-0")
    started = time.monotonic()  # the pod's restart count (read beside its log) gives up too
    assert podlogs.restart_count(conn, "mute-master-0", "pytorch", read_timeout=1.0) is None
    assert time.monotonic() - started < 20
    cluster.clear_faults()
    assert "up" in log(follow=False)
    assert podlogs.restart_count(conn, "mute-master-0", "pytorch") == 0
    conn.core.delete_namespaced_pod("mute-master-0", conn.namespace, grace_period_seconds=0)
    wait_for(lambda: not cluster.processes(), 60, cluster.processes)
