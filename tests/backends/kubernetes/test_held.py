"""A failed pod's rank events wait for its log; each pod's events keep their order."""

from __future__ import annotations

import threading

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.kubernetes.held import HeldEvents


def rank(state: str, rank_: int = 1) -> ev.Event:
    return ev.rank_event(rank_, state, pod="job-worker-0")


def test_held_events_follow_the_log_and_later_ones_wait_behind_them() -> None:
    got: list[tuple[str, object]] = []
    held = HeldEvents(lambda event: got.append((event.kind, event.fields.get("state"))))
    held.tell("job-master-0", [rank("Running", 0)])  # a pod not held: at once
    held.hold("job-worker-0")
    held.tell("job-worker-0", [rank("Failed")])
    held.tell("job-worker-0", [rank("Running")])  # its restart, told before the log was read
    assert got == [("rank", "Running")]
    got.append(("log", "the worker's error line"))  # what the log's reader delivers
    held.release("job-worker-0")
    held.tell("job-worker-0", [rank("Succeeded")])  # released: at once again
    assert got == [
        ("rank", "Running"),
        ("log", "the worker's error line"),
        ("rank", "Failed"),
        ("rank", "Running"),
        ("rank", "Succeeded"),
    ]


def test_events_told_while_the_held_ones_are_delivered_come_after_them() -> None:
    got: list[object] = []
    delivering = threading.Event()
    go_on = threading.Event()

    def sink(event: ev.Event) -> None:
        if event.fields.get("state") == "Failed":
            delivering.set()
            go_on.wait(10)
        got.append(event.fields.get("state"))

    held = HeldEvents(sink)
    held.hold("pod")
    held.tell("pod", [rank("Failed")])
    releasing = threading.Thread(target=held.release, args=("pod",))
    releasing.start()
    assert delivering.wait(10)
    teller = threading.Thread(target=held.tell, args=("pod", [rank("Running")]))
    teller.start()
    teller.join(0.2)  # the teller does not wait for the delivery: its event is queued
    go_on.set()
    releasing.join(10)
    teller.join(10)
    assert got == ["Failed", "Running"]


def test_a_pod_held_twice_waits_for_both_releases() -> None:
    """Two runs' logs read at once: the pod's events wait for the second reader too."""
    got: list[object] = []
    held = HeldEvents(lambda event: got.append(event.fields.get("state")))
    held.hold("pod")
    held.tell("pod", [rank("Failed")])
    held.hold("pod")
    held.tell("pod", [rank("Running")])
    held.release("pod")
    assert got == []
    held.release("pod")
    assert got == ["Failed", "Running"]


def test_a_hold_taken_while_the_held_ones_are_delivered_stops_the_delivery_after_them() -> None:
    got: list[object] = []

    def sink(event: ev.Event) -> None:
        got.append(event.fields.get("state"))
        if event.rank == 1 and event.fields.get("state") == "Failed":  # rank 2 fails meanwhile
            held.hold("pod")
            held.tell("pod", [rank("Failed", 2)])

    held = HeldEvents(sink)
    held.hold("pod")
    held.tell("pod", [rank("Failed")])
    held.release("pod")
    assert got == ["Failed"]
    held.tell("pod", [rank("Running")])
    held.release("pod")
    assert got == ["Failed", "Failed", "Running"]
    held.tell("pod", [rank("Succeeded")])
    assert got[-1] == "Succeeded"
