"""``pods/{name}/portforward``: the official client's ``portforward`` against the emulator."""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import struct
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward

from tests import waiting
from tests.k8s_emulator import Emulator
from tests.k8s_emulator.rewrite import free_port, port_range

NS = "default"
#: Each wait of this file: at most 20 s.
wait_for = functools.partial(waiting.wait_for, timeout=20.0)
#: A TCP echo server on 127.0.0.1:argv[1] (or $MASTER_PORT), one thread per connection.
ECHO = textwrap.dedent(
    """
    import os, socket, sys, threading
    port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ["MASTER_PORT"])
    server = socket.create_server(("127.0.0.1", port))
    print("listening", port, flush=True)
    def serve(conn):
        with conn:
            while data := conn.recv(65536):
                if data == b"bye":
                    return
                conn.sendall(data)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    """
)


def make_pod(
    name: str, command: list[str], labels: dict[str, str] | None = None, **spec: Any
) -> Any:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "python", "command": command}], **spec},
    }


def start_echo(emulator: Emulator, core: client.CoreV1Api, name: str, port: int) -> None:
    core.create_namespaced_pod(NS, make_pod(name, ["python", "-c", ECHO, str(port)]))
    wait_for(lambda: "listening" in log_of(emulator, name), what=f"pod {name} to listen")


def log_of(emulator: Emulator, name: str) -> str:
    try:
        return emulator.pod_log(name)
    except Exception:
        return ""


def pod_connections(emulator: Emulator, port: int) -> int:
    """Established connections the pods' processes hold on their local ``port`` (read from
    each process's own ``/proc/PID/net``: a pod's sockets are in its network namespace)."""
    count = 0
    for proc in emulator.processes():
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
            links = {os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in fds}
            inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
            for table in ("tcp", "tcp6"):
                rows = Path(f"/proc/{proc.pid}/net/{table}").read_text().splitlines()[1:]
                for row in rows:
                    fields = row.split()
                    local_port = int(fields[1].rsplit(":", 1)[1], 16)
                    established = fields[3] == "01"
                    count += local_port == port and established and fields[9] in inodes
        except OSError:
            continue
    return count


@pytest.fixture
def core(k8s_api_client: Any) -> client.CoreV1Api:
    return client.CoreV1Api(k8s_api_client)


@pytest.fixture
def echo(k8s_emulator: Emulator, core: client.CoreV1Api) -> Iterator[int]:
    """Pod ``echo`` serving a TCP echo on the port yielded."""
    port = free_port(set())
    start_echo(k8s_emulator, core, "echo", port)
    yield port


def forward(core: client.CoreV1Api, name: str, *ports: int) -> Any:
    return portforward(
        core.connect_get_namespaced_pod_portforward, name, NS, ports=",".join(map(str, ports))
    )


def exchange(sock: Any, data: bytes, timeout: float = 20.0) -> bytes:
    """Send ``data`` (from a thread, so that both directions flow) and read as much back."""
    sock.settimeout(timeout)
    sender = threading.Thread(target=sock.sendall, args=(data,))
    sender.start()
    got = bytearray()
    while len(got) < len(data):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    sender.join(timeout)
    return bytes(got)


def raw_socket(emulator: Emulator, pod: str, ports: str, protocol: str) -> websocket.WebSocket:
    ws = websocket.WebSocket()
    url = f"ws://127.0.0.1:{emulator.port}/api/v1/namespaces/{NS}/pods/{pod}/portforward"
    ws.connect(f"{url}?ports={ports}", subprotocols=[protocol], timeout=10)
    return ws


# --- the data path ---------------------------------------------------------------------------


def test_bytes_sent_come_back_from_the_pod(echo: int, core: client.CoreV1Api) -> None:
    pf = forward(core, "echo", echo)
    try:
        sock = pf.socket(echo)
        assert exchange(sock, b"hello") == b"hello"
        assert exchange(sock, b"again") == b"again"
        assert pf.error(echo) is None
    finally:
        pf.close()


def test_the_wire_format_is_the_kubelets(k8s_emulator: Emulator, echo: int) -> None:
    """Channel byte first; the port (2 bytes, little-endian) first on each channel."""
    ws = raw_socket(k8s_emulator, "echo", str(echo), "v4.channel.k8s.io")
    try:
        assert ws.subprotocol == "v4.channel.k8s.io"
        head = struct.pack("<H", echo)
        assert ws.recv() == b"\x00" + head
        assert ws.recv() == b"\x01" + head
        ws.send_binary(b"\x00ping")
        assert ws.recv() == b"\x00ping"
    finally:
        ws.close()
    text = raw_socket(k8s_emulator, "echo", str(echo), "v4.base64.channel.k8s.io")
    try:
        assert text.subprotocol == "v4.base64.channel.k8s.io"
        assert [text.recv(), text.recv()] == ["0" + _b64(head), "1" + _b64(head)]
        text.send("0" + _b64(b"pong"))
        assert text.recv() == "0" + _b64(b"pong")
    finally:
        text.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_two_connections_at_once_stay_apart(echo: int, core: client.CoreV1Api) -> None:
    first, second = forward(core, "echo", echo), forward(core, "echo", echo)
    try:
        a, b = first.socket(echo), second.socket(echo)
        results: dict[str, bytes] = {}

        def talk(key: str, sock: Any) -> None:
            results[key] = b"".join(exchange(sock, f"{key}{i};".encode()) for i in range(50))

        threads = [threading.Thread(target=talk, args=(k, s)) for k, s in (("a", a), ("b", b))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for key in "ab":
            assert results[key] == "".join(f"{key}{i};" for i in range(50)).encode()
    finally:
        first.close()
        second.close()


def test_two_ports_of_one_request_are_independent(echo: int, core: client.CoreV1Api) -> None:
    """One port refused (its error channel says so), the other carries data."""
    closed = free_port({echo})
    pf = forward(core, "echo", closed, echo)
    try:
        wait_for(lambda: pf.error(closed), what="the refused port's error")
        assert exchange(pf.socket(echo), b"one") == b"one"
        assert pf.error(echo) is None
    finally:
        pf.close()


def test_a_megabyte_makes_the_round_trip_intact(echo: int, core: client.CoreV1Api) -> None:
    data = os.urandom(1 << 20)
    pf = forward(core, "echo", echo)
    try:
        assert exchange(pf.socket(echo), data) == data
    finally:
        pf.close()


def test_a_port_the_pod_moved_is_followed(k8s_emulator: Emulator, core: client.CoreV1Api) -> None:
    """A Service's port is rewritten for the processes; forwarding to it reaches them."""
    labels = {"app": "moved"}
    core.create_namespaced_service(
        NS,
        {
            "metadata": {"name": "moved"},
            "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 23456}]},
        },
    )
    pod = make_pod("moved-0", ["python", "-c", ECHO], labels)
    pod["spec"]["containers"][0]["env"] = [
        {"name": "MASTER_ADDR", "value": "moved"},
        {"name": "MASTER_PORT", "value": "23456"},
    ]
    core.create_namespaced_pod(NS, pod)
    wait_for(lambda: "listening" in log_of(k8s_emulator, "moved-0"), what="the pod to listen")
    moved = "listening 23456" not in log_of(k8s_emulator, "moved-0")
    assert moved == (k8s_emulator.network_mode == "loopback")  # on the pod network: as written
    pf = forward(core, "moved-0", 23456)
    try:
        assert (
            exchange(pf.socket(23456), b"through the service port") == b"through the service port"
        )
    finally:
        pf.close()


# --- endings and accounting ------------------------------------------------------------------


def test_closing_ends_the_stream_and_the_pod_connection(
    k8s_emulator: Emulator, echo: int, core: client.CoreV1Api
) -> None:
    pf = forward(core, "echo", echo)
    sock = pf.socket(echo)
    assert exchange(sock, b"x") == b"x"
    assert k8s_emulator.stats().port_forwards.current == 1
    assert pod_connections(k8s_emulator, echo) == 1
    pf.close()
    wait_for(lambda: k8s_emulator.stats().port_forwards.current == 0, what="the stream to close")
    wait_for(lambda: pod_connections(k8s_emulator, echo) == 0, what="the pod's connection to close")
    assert k8s_emulator.stats().count("get", "pods/portforward") == 1


def test_the_pod_closing_its_side_ends_the_clients(echo: int, core: client.CoreV1Api) -> None:
    pf = forward(core, "echo", echo)
    try:
        sock = pf.socket(echo)
        sock.settimeout(10)
        sock.sendall(b"bye")  # the echo server closes this connection
        assert sock.recv(10) == b""
        wait_for(lambda: not pf.connected, what="the WebSocket to close")
    finally:
        pf.close()


def test_stopping_the_emulator_closes_open_forwards() -> None:
    with Emulator() as emulator:
        api = emulator.api_client()
        mine = client.CoreV1Api(api)
        port = free_port(set())
        start_echo(emulator, mine, "echo", port)
        pf = forward(mine, "echo", port)
        sock = pf.socket(port)
        assert exchange(sock, b"x") == b"x"
    sock.settimeout(15)
    assert sock.recv(10) == b""


# --- errors ----------------------------------------------------------------------------------


def handshake_error(call: Callable[[], Any]) -> tuple[int, dict[str, Any]]:
    """The HTTP code and Status object of a refused upgrade (the client wraps them in its text)."""
    with pytest.raises(ApiException) as caught:
        call()
    text = str(caught.value.reason)
    assert text.startswith("Handshake status "), text
    code = int(text.split()[2])
    body = text.rsplit("-+-+-", 1)[-1].strip()
    return code, json.loads(body)


def test_a_missing_pod_is_404(core: client.CoreV1Api) -> None:
    code, status = handshake_error(lambda: forward(core, "nope", 8080))
    assert code == 404
    assert status["reason"] == "NotFound"
    assert status["message"] == 'pods "nope" not found'


def test_a_pod_that_is_not_running_is_400(k8s_emulator: Emulator, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        NS, make_pod("done", ["python", "-c", "pass"], restartPolicy="Never")
    )
    wait_for(
        lambda: core.read_namespaced_pod("done", NS).status.phase == "Succeeded",
        what="the pod to end",
    )
    code, status = handshake_error(lambda: forward(core, "done", 8080))
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == "unable to upgrade connection: pod is not running"


def test_an_unscheduled_pod_has_no_host(k8s_emulator: Emulator, core: client.CoreV1Api) -> None:
    k8s_emulator.make_unschedulable("waiting")
    core.create_namespaced_pod(NS, make_pod("waiting", ["python", "-c", "pass"]))
    code, status = handshake_error(lambda: forward(core, "waiting", 8080))
    assert code == 400
    assert status["message"] == "pod waiting does not have a host assigned"


def test_a_refused_port_is_reported_on_the_error_channel(echo: int, core: client.CoreV1Api) -> None:
    closed = free_port({echo})
    pf = forward(core, "echo", closed)
    try:
        sock = pf.socket(closed)
        sock.settimeout(10)
        assert sock.recv(10) == b""
        error = wait_for(lambda: pf.error(closed), what="the error frame")
        assert f"error forwarding port {closed} to pod" in error
        assert f"dial tcp4 127.0.0.1:{closed}: connect: connection refused" in error
    finally:
        pf.close()


def test_denied_and_unauthenticated_requests(
    k8s_emulator: Emulator, core: client.CoreV1Api, echo: int
) -> None:
    k8s_emulator.deny(1, resources=["pods/portforward"])
    code, status = handshake_error(lambda: forward(core, "echo", echo))
    assert code == 403
    assert 'cannot get resource "pods/portforward"' in status["message"]
    k8s_emulator.unauthorized(1)
    code, _ = handshake_error(lambda: forward(core, "echo", echo))
    assert code == 401


def test_a_request_without_ports_or_websocket_is_400(k8s_emulator: Emulator, echo: int) -> None:
    import urllib.error
    import urllib.request

    url = f"{k8s_emulator.url}/api/v1/namespaces/{NS}/pods/echo/portforward?ports={echo}"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10)
    assert caught.value.code == 400
    assert "WebSocket only" in json.loads(caught.value.read())["message"]
    with pytest.raises(websocket.WebSocketBadStatusException) as bad:
        raw_socket(k8s_emulator, "echo", "", "v4.channel.k8s.io")
    assert bad.value.status_code == 400


def test_discovery_lists_the_subresource(k8s_api_client: Any) -> None:
    resources = client.CoreV1Api(k8s_api_client).get_api_resources().resources
    entry = next(r for r in resources if r.name == "pods/portforward")
    assert (entry.kind, sorted(entry.verbs)) == ("PodPortForwardOptions", ["create", "get"])


def test_plain_sockets_reach_the_pod_only_on_loopback(k8s_emulator: Emulator, echo: int) -> None:
    """On the pod network a pod is not on this host's loopback (only port-forward reaches it);
    in the loopback fallback it is (the emulator's documented difference)."""
    if k8s_emulator.network_mode == "pods":
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", echo), timeout=10)
        return
    with socket.create_connection(("127.0.0.1", echo), timeout=10) as sock:
        sock.sendall(b"direct")
        assert sock.recv(10) == b"direct"


def test_an_unknown_subprotocol_is_refused(k8s_emulator: Emulator, echo: int) -> None:
    """SPDY tunnelled through a WebSocket (``kubectl port-forward``) is not served."""
    with pytest.raises(websocket.WebSocketBadStatusException) as bad:
        raw_socket(k8s_emulator, "echo", str(echo), "SPDY/3.1+portforward.k8s.io")
    assert bad.value.status_code == 400
    assert b"requested protocol(s) are not supported" in (bad.value.resp_body or b"")


def test_the_bearer_token_travels_with_the_upgrade() -> None:
    with Emulator(token="s3cret") as emulator:
        core = client.CoreV1Api(emulator.api_client(token="s3cret"))
        port = free_port(set())
        start_echo(emulator, core, "echo", port)
        pf = forward(core, "echo", port)
        try:
            assert exchange(pf.socket(port), b"authorised") == b"authorised"
        finally:
            pf.close()
        anonymous = client.CoreV1Api(emulator.api_client(token="wrong"))
        code, status = handshake_error(lambda: forward(anonymous, "echo", port))
        assert (code, status["reason"]) == (401, "Unauthorized")


def test_each_xdist_worker_hands_out_ports_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers' emulators never pick the same port: their slices do not overlap."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(port_range())
        start, end = slices[-1]
        assert end - start >= 1000, (slices, "the ephemeral range leaves each worker no room")
        picked = [free_port(set()) for _ in range(50)]
        assert all(start <= port < end for port in picked), (worker, slices[-1], picked)
    ends = [bound for start, end in slices for bound in (start, end)]
    assert ends == sorted(ends) and all(start < end for start, end in slices), slices
