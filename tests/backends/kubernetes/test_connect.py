"""``KubernetesBackend.connect``: rank 0's port through the API server's port-forward."""

from __future__ import annotations

import os
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends import optional
from jupyter_disttrain.backends.base import BackendError, JobRecord
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.client import connect
from jupyter_disttrain.backends.kubernetes.portforward import (
    handshake_failure,
    leader_pod,
    open_stream,
)
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.k8s_emulator.rewrite import free_port
from tests.waiting import wait_for

#: Rank 0 serves a TCP echo on 127.0.0.1:PORT for one connection ("bye" ends it); others return.
ECHO_CELL = textwrap.dedent(
    """
    import os, socket
    if int(os.environ["RANK"]) == 0:
        server = socket.create_server(("127.0.0.1", PORT))
        print("serving", PORT, flush=True)
        conn, _ = server.accept()
        with conn:
            while (data := conn.recv(65536)) and data != b"bye":
                conn.sendall(data)
    int(os.environ["RANK"])
    """
)


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apis: tuple[str, ...]) -> Emulator:
    emulator = Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}, apis=apis).start()
    monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
    return emulator


@pytest.fixture(params=["pytorchjob", "trainjob"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Emulator, str]]:
    """An emulated cluster serving the Kubeflow API of the parameter; KUBECONFIG names it."""
    apis = ("kubeflow-v1",) if request.param == "pytorchjob" else ("trainer",)
    emulator = _cluster(tmp_path, monkeypatch, apis)
    try:
        yield emulator, request.param
    finally:
        emulator.stop()


def record(backend: KubernetesBackend, name: str) -> JobRecord:
    return next(r for r in backend.list_jobs() if r.name == name)


def exchange(sock: socket.socket, data: bytes) -> bytes:
    sock.settimeout(60)
    sender = threading.Thread(target=sock.sendall, args=(data,))
    sender.start()
    got = bytearray()
    while len(got) < len(data) and (chunk := sock.recv(1 << 20)):
        got += chunk
    sender.join(60)
    return bytes(got)


@pytest.mark.slow
def test_connect_reaches_rank_0_of_a_running_job(cluster: tuple[Emulator, str]) -> None:
    _, api = cluster
    name = f"pf-{api}"
    port = free_port(set())
    backend = KubernetesBackend()
    options = (("kubeflow_api", api),)
    spec = JobSpec(name, backend="kubernetes", nodes=2, nproc=1, timeout=240, options=options)
    job = jobs.submit(spec, build_payload(ECHO_CELL, {"PORT": port}, job=name), backend)
    wait_for(lambda: any(r.name == name for r in backend.list_jobs()), 60, job.logs)
    # As a session does, connect once rank 0 said it serves. Whether a port that does not accept
    # yet refuses is read from the forward's error within a settle time, which a loaded machine
    # can outlast; the refused port has a test of its own below.
    wait_for(lambda: "serving" in job.logs(), 120, job.logs)
    sock = backend.connect(record(backend, name), port, timeout=180)
    try:
        assert isinstance(sock, socket.socket)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted, as on TCP
        assert exchange(sock, b"hello rank 0") == b"hello rank 0", job.logs()
        data = os.urandom(1 << 20)
        assert exchange(sock, data) == data, job.logs()
        sock.sendall(b"bye")
        sock.settimeout(60)
        assert sock.recv(10) == b""  # rank 0 closed its side: the stream ends
    finally:
        sock.close()
    assert job.result(timeout=120) == 0, job.logs()  # its log stream ran on while forwarding
    # The job has ended: its rank 0 pod no longer runs, and connect says so at once.
    with pytest.raises(BackendError, match=r"has ended \(Succeeded\).*start it again"):
        backend.connect(record(backend, name), port, timeout=30)
    assert backend.stop(name)


@pytest.mark.slow
def test_a_refused_port_times_out_naming_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = _cluster(tmp_path, monkeypatch, ("kubeflow-v1",))
    try:
        backend = KubernetesBackend()
        cell = "import time\ntime.sleep(120)"
        job = jobs.submit(
            JobSpec("pf-refused", backend="kubernetes", timeout=240),
            build_payload(cell, {}, job="pf-refused"),
            backend,
        )
        wait_for(lambda: job.status() == "Running", 120, job.logs)
        closed = free_port(set())
        with pytest.raises(
            BackendError,
            match=rf"port {closed} of job 'pf-refused' within 2 s: .*connection refused",
        ):
            backend.connect(record(backend, "pf-refused"), closed, timeout=2)
        wait_for(lambda: emulator.stats().port_forwards.current == 0, 10, emulator.stats)
        job.stop(timeout=60)
    finally:
        emulator.stop()


def test_a_job_without_pods_times_out_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = _cluster(tmp_path, monkeypatch, ("kubeflow-v1",))
    try:
        gone = JobRecord("pf-gone", "kubernetes", "Running", 1, 1, 1, 0.0, owner="default")
        with pytest.raises(BackendError, match=r"within 1 s: job 'pf-gone' has no pod of node 0"):
            KubernetesBackend().connect(gone, 8080, timeout=1)
    finally:
        emulator.stop()


def test_the_kubernetes_backend_offers_sessions() -> None:
    assert optional.SESSIONS.has(KubernetesBackend())


def test_open_stream_errors_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    emulator = _cluster(tmp_path, monkeypatch, ("kubeflow-v1",))
    try:
        conn = connect()
        with pytest.raises(BackendError, match=r"pod 'nope' not found .*start the session again"):
            open_stream(conn, "nope", 8080)
        emulator.deny(1, resources=["pods/portforward"])
        with pytest.raises(BackendError, match=r"403 Forbidden.*docs/rbac\.yaml"):
            open_stream(conn, "nope", 8080)
    finally:
        emulator.stop()


def test_requests_on_the_connection_go_on_while_forwarding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client swaps its ApiClient's transport to open a WebSocket; others must not see it."""
    from kubernetes import client

    from tests.k8s_emulator_test.test_portforward import start_echo

    emulator = _cluster(tmp_path, monkeypatch, ("kubeflow-v1",))
    try:
        conn = connect()
        port = free_port(set())
        start_echo(emulator, conn.core, "echo", port)
        answers: list[Any] = []
        stop = threading.Event()

        def list_pods() -> None:
            while not stop.is_set():
                try:
                    answers.append(conn.core.list_namespaced_pod(conn.namespace))
                except Exception as exc:  # recorded: the assertion shows it
                    answers.append(exc)

        lister = threading.Thread(target=list_pods)
        lister.start()
        try:
            for _ in range(10):
                with open_stream(conn, "echo", port, settle=0.0) as sock:
                    assert exchange(sock, b"ping") == b"ping"
        finally:
            stop.set()
            lister.join(30)
        odd = [a for a in answers if not isinstance(a, client.V1PodList)]
        assert answers and not odd, odd[:3]
    finally:
        emulator.stop()


def _pod(name: str, labels: dict[str, str], **meta: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, **meta}}


def test_the_leader_pod_is_node_0_of_each_kind() -> None:
    v1 = "training.kubeflow.org/replica-type"
    index = "training.kubeflow.org/replica-index"
    pytorch = [
        _pod("j-worker-0", {v1: "worker", index: "0"}),
        _pod("j-master-0", {v1: "master", index: "0"}),
    ]
    assert (leader_pod(pytorch) or {})["metadata"]["name"] == "j-master-0"
    workers_only = [_pod(f"j-worker-{i}", {v1: "worker", index: str(i)}) for i in (1, 0)]
    assert (leader_pod(workers_only) or {})["metadata"]["name"] == "j-worker-0"
    completion = "batch.kubernetes.io/job-completion-index"
    replicated = "jobset.sigs.k8s.io/replicatedjob-name"
    trainjob = [
        _pod("t-dataset-initializer-0-0", {replicated: "dataset-initializer", completion: "0"}),
        _pod("t-node-0-1", {replicated: "node", completion: "1"}),
        _pod("t-node-0-0", {replicated: "node", completion: "0"}),
    ]
    assert (leader_pod(trainjob) or {})["metadata"]["name"] == "t-node-0-0"
    replaced = [
        _pod(
            "old", {replicated: "node", completion: "0"}, deletionTimestamp="2026-01-01T00:00:00Z"
        ),
        _pod("new", {replicated: "node", completion: "0"}),
    ]
    assert (leader_pod(replaced) or {})["metadata"]["name"] == "new"
    failed = _pod("failed", {v1: "master", index: "0"}, creationTimestamp="2026-01-01T00:00:02Z")
    failed["status"] = {"phase": "Failed"}
    again = _pod("again", {v1: "master", index: "0"}, creationTimestamp="2026-01-01T00:00:01Z")
    older = _pod("older", {v1: "master", index: "0"}, creationTimestamp="2026-01-01T00:00:00Z")
    assert (leader_pod([older, failed, again]) or {})["metadata"]["name"] == "again"
    assert leader_pod([]) is None


def test_a_refused_upgrade_is_read_from_the_clients_text() -> None:
    from kubernetes.client.rest import ApiException

    body = '{"kind": "Status", "message": "pods \\"x\\" not found", "code": 404}'
    text = (
        f"Handshake status 404 Not Found -+-+- {{'content-type': 'application/json'}} -+-+- {body}"
    )
    assert handshake_failure(ApiException(status=0, reason=text)) == (
        404,
        {"kind": "Status", "message": 'pods "x" not found', "code": 404},
    )
    assert handshake_failure(ApiException(status=0, reason="Connection refused")) == (0, {})
