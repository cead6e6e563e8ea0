"""Kubernetes Events and pods as start-up phase facts (phases.py, pure)."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.backends.kubernetes.phases import (
    event_fact,
    observed_at,
    pod_facts,
    queue_fact,
)

STAMP = "2027-01-15T08:00:00Z"
T = 1_800_000_000.0  # STAMP as Unix time
IMAGE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def event(
    reason: str,
    message: str,
    field_path: str = "spec.containers{node}",
    kind: str = "Pod",
    name: str = "tj-node-0-1-abcde",
    type_: str = "Normal",
) -> dict[str, Any]:
    involved = {"kind": kind, "name": name, "namespace": "default"}
    if field_path:
        involved["fieldPath"] = field_path
    return {
        "type": type_,
        "reason": reason,
        "message": message,
        "involvedObject": involved,
        "firstTimestamp": STAMP,
        "lastTimestamp": STAMP,
        "count": 1,
    }


def test_the_kubelet_and_scheduler_events_map_to_phases() -> None:
    said = {
        reason: event_fact(event(reason, message, path), "node")
        for reason, message, path in [
            ("Scheduled", "Successfully assigned default/tj-node-0-1-abcde to kind-worker", ""),
            ("Pulling", f'Pulling image "{IMAGE}"', "spec.containers{node}"),
            (
                "Pulled",
                f'Successfully pulled image "{IMAGE}" in 35.2s (35.2s including waiting). '
                "Image size: 3012345678 bytes.",
                "spec.containers{node}",
            ),
            ("Created", "Created container node", "spec.containers{node}"),
            ("Started", "Started container node", "spec.containers{node}"),
        ]
    }
    assert {r: (f.phase, f.state) for r, f in said.items() if f} == {
        "Scheduled": ("scheduled", "done"),
        "Pulling": ("image", "waiting"),
        "Pulled": ("image", "done"),
        "Started": ("started", "done"),
    }
    assert said["Created"] is None
    pulling = said["Pulling"]
    assert pulling is not None and pulling.message == (
        f'pod tj-node-0-1-abcde pulling image "{IMAGE}"'
    )


def test_waiting_facts_say_why_and_other_containers_do_not_finish_a_phase() -> None:
    unschedulable = event_fact(
        event(
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            "",
            type_="Warning",
        ),
        "node",
    )
    assert unschedulable is not None and unschedulable.message == (
        "pod tj-node-0-1-abcde unschedulable: 0/3 nodes are available: 3 Insufficient "
        "nvidia.com/gpu."
    )
    backoff = event_fact(event("BackOff", f'Back-off pulling image "{IMAGE}"'), "node")
    assert backoff is not None and (backoff.phase, backoff.state) == ("image", "waiting")
    init = event_fact(
        event("Started", "Started container stage", "spec.initContainers{stage}"), "node"
    )
    assert init is not None and init.message == "pod tj-node-0-1-abcde running init container stage"
    assert (
        event_fact(event("Pulled", "already present", "spec.initContainers{stage}"), "node") is None
    )
    crash = event("BackOff", "Back-off restarting failed container node in pod x", type_="Warning")
    assert event_fact(crash, "node") is None
    assert event_fact(event("Started", "x", "", kind="TrainJob", name="tj"), "node") is None


def test_kueue_events_on_the_job_say_where_it_waits() -> None:
    created = queue_fact(
        event(
            "CreatedWorkload",
            "Created Workload: default/trainjob-tj-1a2b3",
            "",
            kind="TrainJob",
            name="tj",
        )
    )
    assert created is not None and created.message == (
        "queued in Kueue (Created Workload: default/trainjob-tj-1a2b3)"
    )
    admitted = queue_fact(
        event("Started", "Admitted by clusterQueue cluster-queue", "", kind="TrainJob", name="tj")
    )
    assert admitted is not None and admitted.message.startswith("Admitted by clusterQueue")
    assert queue_fact(event("Suspended", "x", "", kind="TrainJob", name="tj")) is None


def test_a_pod_object_says_created_scheduled_pulling_started() -> None:
    pod = {
        "metadata": {"name": "job-worker-0", "creationTimestamp": STAMP},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": STAMP}],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": {
                        "waiting": {
                            "reason": "ImagePullBackOff",
                            "message": f'Back-off pulling image "{IMAGE}"',
                        }
                    },
                }
            ],
        },
    }
    facts = [(f.phase, f.state) for f in pod_facts(pod, "pytorch")]
    assert facts == [("queued", "done"), ("scheduled", "done"), ("image", "waiting")]
    pod["status"]["containerStatuses"] = [
        {"name": "pytorch", "state": {"running": {"startedAt": STAMP}}, "started": True}
    ]
    assert [f.phase for f in pod_facts(pod, "pytorch")][-1] == "started"
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes",
        }
    ]
    assert pod_facts(pod, "pytorch")[1].message == "pod job-worker-0 unschedulable: 0/3 nodes"


def test_a_fact_is_timed_by_its_arrival_unless_it_is_a_replay() -> None:
    assert observed_at(STAMP, T + 0.7) == T + 0.7  # live: the arrival is more precise
    assert observed_at(STAMP, T + 30) == T  # attached later: the object's own time
    assert observed_at(None, T + 30) == T + 30 and observed_at("garbage", 5.0) == 5.0
