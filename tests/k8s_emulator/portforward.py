"""``pods/{name}/portforward`` over a WebSocket, as the API server and kubelet serve it.

``GET /api/v1/namespaces/{ns}/pods/{name}/portforward?ports=P[,Q...]`` upgraded
to a WebSocket (the protocol of the official Python client's
``kubernetes.stream.portforward``). Subprotocols: ``v4.channel.k8s.io`` and
``channel.k8s.io`` (binary frames; also used when the client names none), and
``v4.base64.channel.k8s.io`` / ``base64.channel.k8s.io`` (text frames, the
channel as an ASCII digit, the payload base64-encoded).

Port ``i`` of the request has two channels: data ``2*i`` (both ways) and error
``2*i+1`` (server to client). Every frame starts with its channel byte; the
first frame the server sends on each channel is the port number as 2 bytes
little-endian. As the kubelet's streaming server does (containerd's
``PortForward``), each port gets one TCP connection to the pod, opened when
the WebSocket opens; a refused connection is reported as text on the error
channel. When the pod's side of the connection ends, the other direction gets
up to a second to end too; when every port is done the WebSocket is closed.
When the client closes the WebSocket, the pod's connections are closed.

On the pod network (:mod:`.podnet`) the connection goes to ``127.0.0.1:P``
(then ``[::1]:P``) inside the pod's network namespace, as the kubelet's does.
Where pods share this host's loopback, it goes to this host's ``127.0.0.1:P``;
where the emulator moved a port there (a
Service of the pod, or the pod's ``hostname.subdomain``, was given its own
local port: see :mod:`.rewrite`), the moved port is used, so forwarding to a
pod's ``containerPort`` reaches the process listening on the rewritten port.

Errors before the upgrade are ``Status`` objects as the API server sends them:
404 for a missing pod, 400 ``pod NAME does not have a host assigned`` for an
unscheduled one, 400 ``unable to upgrade connection: pod is not running`` for
a pod that is not ``Running``, 400 for a missing or malformed ``ports`` or
only unknown subprotocols, and 401/403 from the armed faults. SPDY (``POST``
with ``Upgrade: SPDY/3.1``) and SPDY tunnelled through a WebSocket (what
``kubectl port-forward`` speaks) are not served: 400.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tornado.websocket

from .faults import RequestInfo, unauthorized
from .meta import ApiError, Obj, bad_request
from .resources import PODS, SERVICES

if TYPE_CHECKING:
    from .emulator import Emulator

#: The route (tornado anchors it at both ends).
PATH = r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward"
BINARY_PROTOCOLS = ("v4.channel.k8s.io", "channel.k8s.io")
BASE64_PROTOCOLS = ("v4.base64.channel.k8s.io", "base64.channel.k8s.io")
#: How long the other direction may run on after one direction ended (containerd: 1 s).
LINGER = 1.0
#: Bytes read from the pod per frame.
CHUNK = 256 * 1024
#: How long dialling the pod may take.
DIAL_TIMEOUT = 5.0
#: Makes a connection (host, port, timeout) inside a pod's network namespace.
Connect = Callable[[str, int, float], socket.socket]
#: The discovery entry of the subresource (``/api/v1``).
DISCOVERY: Obj = {
    "name": "pods/portforward",
    "singularName": "",
    "namespaced": True,
    "kind": "PodPortForwardOptions",
    "verbs": ["create", "get"],
}


def parse_ports(values: list[str]) -> list[int]:
    """The ports of the ``ports`` query parameters (comma-separated), as the kubelet reads them."""
    if not values:
        raise bad_request('query parameter "port" is required')
    ports: list[int] = []
    for text in values:
        if not text:
            raise bad_request('query parameter "port" cannot be empty')
        for part in text.split(","):
            try:
                port = int(part)
                if not 0 <= port <= 65535 or not part.isdigit():
                    raise ValueError(part)
            except ValueError:
                raise bad_request(
                    f'unable to parse "{text}" as a port: strconv.ParseUint: parsing '
                    f'"{part}": invalid syntax'
                ) from None
            if port < 1:
                raise bad_request(f'port "{text}" must be > 0')
            ports.append(port)
    return ports


def sandbox_id(pod: Obj) -> str:
    """A stable stand-in for the pod sandbox's id (the kubelet names the pod by it)."""
    return hashlib.sha256(pod["metadata"]["uid"].encode()).hexdigest()


def local_port(emulator: Emulator, pod: Obj, port: int) -> int:
    """The port on this host that stands for ``port`` of ``pod`` (see the module docstring)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    namespace = meta["namespace"]
    labels = meta.get("labels") or {}
    keys: list[tuple[str, int]] = []
    if spec.get("hostname") and spec.get("subdomain"):
        keys.append((f"{spec['hostname']}.{spec['subdomain']}", port))
    for service in emulator.store.objects(SERVICES.key, namespace)[0]:
        selector = (service.get("spec") or {}).get("selector") or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            continue
        name = service["metadata"]["name"]
        for entry in (service.get("spec") or {}).get("ports") or []:
            target = entry.get("targetPort", entry.get("port"))
            if target == port or str(target) == str(port):
                keys.append((name, int(entry["port"])))
        keys.append((name, port))
    for name, number in keys:
        moved = emulator.network.allocated(namespace, name, number)
        if moved is not None:
            return moved
    return port


async def _open(
    host: str, port: int, connect: Connect | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if connect is None:
        return await asyncio.open_connection(host, port)
    loop = asyncio.get_running_loop()
    sock = await loop.run_in_executor(None, connect, host, port, DIAL_TIMEOUT)
    sock.setblocking(False)
    return await asyncio.open_connection(sock=sock)


async def dial(
    port: int, connect: Connect | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the pod's ``localhost:port``: IPv4, then IPv6, as containerd does
    (``connect(host, port, timeout)`` makes the connection inside the pod's network
    namespace; None: this host's)."""
    errors: list[str] = []
    for family, host, shown in (("tcp4", "127.0.0.1", "127.0.0.1"), ("tcp6", "::1", "[::1]")):
        try:
            return await asyncio.wait_for(_open(host, port, connect), DIAL_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            reason = (
                "i/o timeout"
                if isinstance(exc, asyncio.TimeoutError)
                else (
                    "connection refused"
                    if isinstance(exc, ConnectionRefusedError)
                    else (exc.strerror or str(exc)).lower()
                )
            )
            label = "IPv4" if family == "tcp4" else "IPv6"
            errors.append(f"{label}: dial {family} {shown}:{port}: connect: {reason}")
    raise ConnectionError(" ".join(errors))


@dataclass
class _Port:
    """One forwarded port of a WebSocket: its channels and its pod connection."""

    index: int
    port: int
    target: int
    writer: asyncio.Future[asyncio.StreamWriter | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def data(self) -> int:
        return 2 * self.index

    @property
    def error(self) -> int:
        return 2 * self.index + 1


class PortForwardHandler(tornado.websocket.WebSocketHandler):
    """One port-forward WebSocket (the ports of one request)."""

    emulator: Emulator

    def initialize(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._ports: list[_Port] = []
        self._pod: Obj = {}
        self._base64 = False
        self._closed = asyncio.Event()
        self._opened = False
        self._tasks: list[asyncio.Future[Any]] = []
        self._watcher: asyncio.Future[Any] | None = None

    # --- before the upgrade: the API server's checks -------------------------------------

    async def prepare(self) -> None:
        emulator = self.emulator
        namespace, name = self.path_args
        emulator.accounting.request("get", "pods/portforward")
        try:
            if emulator.token is not None:
                if self.request.headers.get("Authorization", "") != f"Bearer {emulator.token}":
                    raise unauthorized()
            info = RequestInfo("get", "pods/portforward", "", namespace, name, self.request.path)
            refusal = emulator.faults.check(info)
            if refusal is not None:
                raise refusal
            pod = emulator.api.get(PODS, namespace, name)
            if not pod["spec"].get("nodeName"):
                raise bad_request(f"pod {name} does not have a host assigned")
            if self.request.headers.get("Upgrade", "").lower() != "websocket":
                raise bad_request(
                    "Upgrade request required: this API server serves port forwarding over "
                    "WebSocket only (v4.channel.k8s.io), not SPDY"
                )
            offered = [
                p.strip()
                for p in self.request.headers.get("Sec-WebSocket-Protocol", "").split(",")
                if p.strip()
            ]
            if offered and not set(offered) & {*BINARY_PROTOCOLS, *BASE64_PROTOCOLS}:
                raise bad_request(
                    "unable to upgrade connection: requested protocol(s) are not supported: "
                    f"{offered}; supported: {[*BINARY_PROTOCOLS, *BASE64_PROTOCOLS]}"
                )
            ports = parse_ports(self.get_query_arguments("ports"))
            if (pod.get("status") or {}).get("phase") != "Running":
                raise bad_request("unable to upgrade connection: pod is not running")
        except ApiError as error:
            self.set_status(error.code)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(error.status()))
            return
        self._pod = pod
        self._ports = [_Port(i, p, local_port(emulator, pod, p)) for i, p in enumerate(ports)]

    def check_origin(self, origin: str) -> bool:
        return True

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        for offered in subprotocols:
            if offered in BINARY_PROTOCOLS or offered in BASE64_PROTOCOLS:
                return offered
        return None

    # --- the stream ----------------------------------------------------------------------

    def open(self, *args: str, **kwargs: str) -> None:
        self._opened = True
        self._base64 = self.selected_subprotocol in BASE64_PROTOCOLS
        self.emulator.accounting.open("portforward")
        wake: asyncio.Queue[Any] = asyncio.Queue()
        self.emulator.streams.add(wake)
        self._watcher = asyncio.ensure_future(self._on_shutdown(wake))
        for port in self._ports:
            head = struct.pack("<H", port.port)
            self._send(port.data, head)
            self._send(port.error, head)
        forwards = [asyncio.ensure_future(self._forward(port)) for port in self._ports]
        self._tasks.extend(forwards)
        self._tasks.append(asyncio.ensure_future(self._close_when_done(forwards)))

    def _send(self, channel: int, payload: bytes) -> Awaitable[None] | None:
        """Queue one frame; its future resolves once written (None when the socket is gone)."""
        try:
            if self._base64:
                text = chr(ord("0") + channel) + base64.b64encode(payload).decode("ascii")
                return self.write_message(text)
            return self.write_message(bytes((channel,)) + payload, binary=True)
        except tornado.websocket.WebSocketClosedError:
            return None

    def _connect(self) -> Connect | None:
        """How to reach the pod: inside its network namespace when it has one."""
        kubelet, podnet = self.emulator.kubelet, self.emulator.podnet
        worker = kubelet.worker(self._pod) if kubelet is not None else None
        if podnet is None or worker is None or worker.netns is None:
            return None
        return functools.partial(podnet.connect, worker.uid)

    async def _forward(self, port: _Port) -> None:
        try:
            reader, writer = await dial(port.target, self._connect())
        except ConnectionError as exc:
            if port.writer.done():
                return
            port.writer.set_result(None)
            pod = sandbox_id(self._pod)
            self._send(
                port.error,
                (
                    f"error forwarding port {port.port} to pod {pod}, uid : failed to execute "
                    f'portforward in network namespace "/var/run/netns/cni-{pod[:36]}": failed '
                    f'to connect to localhost:{port.port} inside namespace "{pod}", {exc} '
                ).encode(),
            )
            return
        if port.writer.done():  # the client left while the pod was dialled
            writer.close()
            return
        port.writer.set_result(writer)
        try:
            while chunk := await reader.read(CHUNK):
                sent = self._send(port.data, chunk)
                if sent is None:
                    return
                try:
                    await sent
                except tornado.websocket.WebSocketClosedError:
                    return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), LINGER)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _close_when_done(self, forwards: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*forwards, return_exceptions=True)
        if not self._closed.is_set():
            self.close()

    async def _on_shutdown(self, wake: asyncio.Queue[Any]) -> None:
        try:
            await wake.get()
        finally:
            self.emulator.streams.discard(wake)
        if not self._closed.is_set():
            self.close(1001, "the API server is shutting down")

    async def on_message(self, message: str | bytes) -> None:
        if isinstance(message, str):
            if not message:
                return
            try:
                data = bytes((ord(message[0]) - ord("0"),)) + base64.b64decode(message[1:])
            except ValueError:  # a channel below "0", or not base64
                return
        else:
            data = message
        if not data:
            return
        index, kind = divmod(data[0], 2)
        if kind or index >= len(self._ports):
            return  # the error channels are the server's; unknown channels are dropped
        writer = await self._ports[index].writer
        if writer is None or writer.is_closing():
            return
        try:
            writer.write(data[1:])
            await writer.drain()
        except (ConnectionError, OSError):
            pass

    def on_close(self) -> None:
        self._closed.set()
        for port in self._ports:
            if not port.writer.done():
                port.writer.set_result(None)
            elif (writer := port.writer.result()) is not None:
                writer.close()
        if self._opened:
            self._opened = False
            self.emulator.accounting.close("portforward")
        if self._watcher is not None:
            self._watcher.cancel()
