"""Who may stop a job of the namespace: one rule and one cache, in the service."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jupyter_disttrain.backends.base import (
    Backend,
    EventSink,
    JobRecord,
    Plan,
    ScopeFacts,
    Submission,
)
from jupyter_disttrain.payload import Payload
from jupyter_disttrain.service import namespace
from jupyter_disttrain.spec import JobSpec


class Scope(Backend):
    """A backend whose scope has one foreign job; RBAC answers ``allowed`` and is counted."""

    name = "scope"

    def __init__(self, allowed: bool | None) -> None:
        self.allowed = allowed
        self.asked = 0
        facts = ScopeFacts(foreign=True, workload="PyTorchJob", started_by="ana")
        self.foreign = JobRecord("theirs", "scope", "Running", 2, 2, 1, 1.0, facts=facts)

    def plan(self, spec: JobSpec, payload: Payload) -> Plan:
        raise NotImplementedError

    def submit(self, plan: Plan, sink: EventSink) -> Submission:
        raise NotImplementedError

    def list_jobs(self) -> list[JobRecord]:
        return []

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        return ""

    def stop(self, name: str) -> bool:
        return True

    def list_namespace(self) -> list[JobRecord]:
        return [self.foreign]

    def watch_namespace(self) -> Callable[[], None] | None:
        return None

    def may_stop(self, name: str) -> bool | None:
        self.asked += 1
        return self.allowed


def test_a_foreign_job_rbac_forbids_is_refused_with_the_rule() -> None:
    backend = Scope(allowed=False)
    with pytest.raises(namespace.StopRefused, match="RBAC does not allow deleting this PyTorch"):
        namespace.check_stop(backend, backend.foreign)
    with pytest.raises(namespace.StopRefused, match="theirs is read-only here"):
        namespace.stop_question(backend, "theirs")


def test_a_foreign_job_rbac_allows_asks_for_confirmation() -> None:
    backend = Scope(allowed=True)
    namespace.check_stop(backend, backend.foreign)
    question = namespace.stop_question(backend, "theirs")
    assert question is not None and "PyTorchJob started by ana" in question


def test_own_and_ended_jobs_may_be_stopped_without_asking() -> None:
    backend = Scope(allowed=False)
    rights = namespace.StopRights()
    own = JobRecord("mine", "scope", "Running", 1, 1, 1, 1.0)
    ended = JobRecord("old", "scope", "Failed", 1, 1, 1, 1.0, facts=ScopeFacts(foreign=True))
    assert rights.allows(backend, own) and rights.allows(backend, ended)
    namespace.check_stop(backend, own)
    assert backend.asked == 0


def test_rights_are_asked_once_per_kind_until_they_are_old() -> None:
    now = [100.0]
    backend = Scope(allowed=False)
    rights = namespace.StopRights(clock=lambda: now[0], seconds=60.0)
    assert not rights.allows(backend, backend.foreign)
    backend.allowed = True
    now[0] += 59.0
    assert not rights.allows(backend, backend.foreign) and backend.asked == 1
    now[0] += 2.0
    assert rights.allows(backend, backend.foreign) and backend.asked == 2


class Core(Backend):
    """Only the core: its own jobs, no namespace feature."""

    name = "core"

    def plan(self, spec: JobSpec, payload: Payload) -> Plan:
        raise NotImplementedError

    def submit(self, plan: Plan, sink: EventSink) -> Submission:
        raise NotImplementedError

    def list_jobs(self) -> list[JobRecord]:
        return [JobRecord("own", "core", "Running", 1, 1, 1, 1.0)]

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        return ""

    def stop(self, name: str) -> bool:
        return True


def test_a_backend_without_the_namespace_feature_lists_its_own_and_cannot_tell() -> None:
    core = Core()
    assert [r.name for r in namespace.scope_records(core)] == ["own"]
    assert namespace.may_stop(core, "own") is None
    assert namespace.stop_question(core, "own") is None
