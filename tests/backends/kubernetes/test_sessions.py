"""Sessions on Kubernetes: a warm group reached through port-forward, on both Kubeflow APIs."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.kinds import PYTORCHJOB, TRAINJOB
from jupyter_disttrain.backends.kubernetes.labels import PREFIX, job_labels, read_labels
from jupyter_disttrain.backends.kubernetes.records import record_from_object, spec_from_object
from jupyter_disttrain.job import Job
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.server.views import job_json
from jupyter_disttrain.service import JobService
from jupyter_disttrain.sessions import Session, SessionError, SessionLost, session_spec
from jupyter_disttrain.spec import JobSpec, job_source
from tests.crd_schema import validate_manifest
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.waiting import wait_for

APIS = {"pytorchjob": ("kubeflow-v1",), "trainjob": ("trainer",)}

BUILD = textwrap.dedent(
    """
    import torch.distributed as dist
    me = dist.get_rank()
    seen = [me]
    """
)
USE = textwrap.dedent(
    """
    seen.append(me)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (me, seen))
    gathered
    """
)


def spec(name: str, api: str, nodes: int = 2) -> JobSpec:
    options = (("kubeflow_api", api),)
    return JobSpec(name, backend="kubernetes", nodes=nodes, nproc=1, options=options)


def logs(session: Session) -> str:
    """Every rank's output, for assertion messages."""
    try:
        return session.backend.logs(session.name)
    except Exception as exc:
        return f"(no logs: {exc})"


# --------------------------------------------------------------------------- objects (pure)


@pytest.mark.parametrize("api", sorted(APIS))
def test_a_session_is_labelled_and_its_payload_is_a_secret(api: str) -> None:
    session = session_spec(spec("sess-objects", api))
    payload = build_payload("None", {}, job=session.name, extra={"session": {"token": "t"}})
    payload_obj, job, *_ = KubernetesBackend().objects(session, payload)
    assert payload_obj["kind"] == "Secret" and "binaryData" not in payload_obj
    assert job["kind"] == (TRAINJOB if api == "trainjob" else PYTORCHJOB).kind
    assert job["metadata"]["labels"][PREFIX + "source"] == "session"
    validate_manifest(job)
    mounted = repr(job["spec"])
    assert "'secretName': 'sess-objects-payload'" in mounted and "configMap" not in mounted
    kind = TRAINJOB if api == "trainjob" else PYTORCHJOB
    assert job_source(record_from_object(job, kind).extra) == "session"
    assert ("source", "session") in spec_from_object(job, kind).labels
    job["metadata"]["labels"] = {PREFIX + "kind": "session"}  # a session labelled before the rename
    assert job_source(record_from_object(job, kind).extra) == "session"
    plain = KubernetesBackend().objects(spec("sess-objects", api), payload)
    assert plain[0]["kind"] == "Secret"  # every payload carries the job key: always a Secret


def test_a_label_value_no_label_can_hold_travels_as_an_annotation() -> None:
    labels, annotations = job_labels([("source", "session"), ("note", "two words")])
    assert labels == {PREFIX + "source": "session"}
    assert annotations == {PREFIX + "note": "two words"}
    meta = {"labels": {**labels, "other": "x"}, "annotations": annotations}
    assert read_labels(meta) == {"source": "session", "note": "two words"}
    with pytest.raises(ValueError, match="not a label name"):
        job_labels([("a b", "x")])


# --------------------------------------------------------------------------- on the emulator


@pytest.fixture(params=sorted(APIS))
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Emulator, str]]:
    """An emulated cluster serving the Kubeflow API of the parameter; KUBECONFIG names it."""
    env = {"GLOO_SOCKET_IFNAME": pod_interface()}
    with Emulator(env=env, apis=APIS[request.param]) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator, request.param


def listed(service: JobService, name: str) -> dict[str, Any]:
    backend = service.backend("kubernetes")
    record = next(r for r in service.list_jobs([backend]).records if r.name == name)
    return dict(job_json(record, None, now=time.time()))


@pytest.mark.slow
def test_a_session_runs_cells_over_port_forward_and_stop_deletes_it(
    cluster: tuple[Emulator, str],
) -> None:
    emulator, api = cluster
    name = f"ks-{api}"
    service = JobService()
    started = time.monotonic()
    session = service.start_session(spec(name, api))
    took = time.monotonic() - started
    try:
        assert session.run(BUILD) is None, logs(session)
        assert session.run(USE) == [(0, [0, 0]), (1, [1, 1])], logs(session)  # every rank's state
        cell = "if dist.get_rank() == 1:\n    raise KeyError('no column on rank 1')"
        with pytest.raises(KeyError) as caught:
            session.run(cell)
        assert "[rank 1]" in str(caught.value), logs(session)
        assert session.run("len(seen)") == 2  # the error left the group usable
        cells: list[Job] = []
        session.run("report(step=len(seen), rank_seen=me)", on_cell=cells.append)
        rows = sorted((m["rank"], m["step"]) for m in cells[0].metrics())
        assert rows == [(0, 2), (1, 2)], (rows, logs(session))  # node 1's through rank 0's log
        assert cells[0].status() == "Succeeded"
        warm = []
        for _ in range(5):
            t0 = time.monotonic()
            assert session.run("me + 1") == 1
            warm.append(time.monotonic() - t0)
        print(f"{api}: session start {took:.2f} s, warm cell {sorted(warm)[2]:.3f} s (median)")
        row = listed(service, name)
        assert (row["source"], row["state"]) == ("session", "Running"), row
    finally:
        final = service.stop_session(name)
    assert final in ("Succeeded", "Stopped"), logs(session)
    backend = service.backend("kubernetes")
    wait_for(lambda: all(r.name != name for r in backend.list_jobs()), 60, backend.list_jobs)
    wait_for(lambda: not emulator.processes(), 60, emulator.processes)


@pytest.mark.slow
def test_a_session_in_another_namespace_ends_when_idle_and_restarts_there(
    cluster: tuple[Emulator, str],
) -> None:
    """A session in a namespace other than the kubeconfig's is reached there, its logs read
    there by name; its idle timeout ends the job and its pods, the name is free again for a
    restart, and stop deletes it there."""
    emulator, api = cluster
    name = f"ks-idle-{api}"
    service = JobService()
    options = (("kubeflow_api", api), ("namespace", "team-b"))
    session = service.start_session(
        JobSpec(name, backend="kubernetes", nodes=2, nproc=1, options=options), idle_timeout=6.0
    )
    kind = TRAINJOB if api == "trainjob" else PYTORCHJOB
    backend = session.backend
    assert isinstance(backend, KubernetesBackend)
    custom = k8s.CustomObjectsApi(backend.connection().api)

    def in_team_b() -> list[str]:
        found = custom.list_namespaced_custom_object(
            kind.group, kind.version, "team-b", kind.plural
        )
        return [o["metadata"]["name"] for o in found["items"]]

    assert session.job is not None
    assert session.run("x = 41") is None, session.job.logs()
    assert session.run("x + 1") == 42, session.job.logs()
    assert in_team_b() == [name]
    assert session.job.wait(120) == "Succeeded", session.job.logs()
    wait_for(lambda: not emulator.processes(), 60, emulator.processes)
    # read by name by the backend that submitted it: in the job's namespace, not the default
    assert "no cell for 6 s (--idle-timeout)" in session.job.logs()
    with pytest.raises(SessionError, match=f"restart {name}"):
        session.run("1")
    again = service.restart_session(name)
    assert again.run("2") == 2, again.job and again.job.logs()  # the name is free again
    assert in_team_b() == [name]
    service.stop_session(name)
    wait_for(lambda: not in_team_b(), 60, lambda: "the session's job is still in team-b")
    wait_for(lambda: not emulator.processes(), 60, emulator.processes)
    assert all(r.name != name for r in service.backend("kubernetes").list_jobs())


@pytest.mark.slow
def test_kernel_exit_leaves_a_kubernetes_session_running_until_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}, apis=APIS["pytorchjob"]) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        service = JobService()
        session = service.start_session(spec("ks-kernel", "pytorchjob", nodes=1))
        assert session.run("x = 5\nx") == 5, logs(session)
        service.stop_all(timeout=10)  # what the kernel's exit runs
        kernel_gone = JobService()  # the next kernel: lists the session, still running
        assert listed(kernel_gone, "ks-kernel")["source"] == "session"
        assert listed(kernel_gone, "ks-kernel")["state"] == "Running"
        assert emulator.processes()
        assert kernel_gone.backend("kubernetes").stop("ks-kernel")
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)


@pytest.mark.slow
def test_a_rank_that_dies_restarts_the_group_under_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}, apis=APIS["pytorchjob"]) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        service = JobService()
        session = service.start_session(spec("ks-dies", "pytorchjob"))
        try:
            session.run("kept = 1")
            cell = "import os, time\nif dist.get_rank() == 1:\n    os._exit(3)\ntime.sleep(120)"
            with pytest.raises(SessionLost, match=r"a rank died .*restarted its group") as caught:
                session.run("import torch.distributed as dist\n" + cell)
            assert "state was lost" in str(caught.value), logs(session)
            assert session.restarts == 1 and session.alive
            assert session.run("import torch.distributed as dist\ndist.get_world_size()") == 2
            with pytest.raises(NameError):
                session.run("kept")
        finally:
            service.stop_session("ks-dies")
        wait_for(lambda: not emulator.processes(), 60, emulator.processes)
