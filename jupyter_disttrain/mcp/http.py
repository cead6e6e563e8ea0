"""The streamable HTTP transport, served inside another asyncio web server.

:class:`HttpEndpoint` holds an MCP server's streamable HTTP session manager
(stateless, JSON answers) and runs it on the running event loop from the first
request on; :meth:`HttpEndpoint.handle` serves one request given as an ASGI
scope, its body and a ``send`` callable. The caller (the Jupyter server
extension) authenticates the request first; the SDK's own DNS-rebinding guard
admits only loopback hosts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import MCPServer

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]


class HttpEndpoint:
    """One MCP server's HTTP endpoint; :meth:`close` ends its session manager."""

    def __init__(self, server: MCPServer) -> None:
        server.streamable_http_app(stateless_http=True, json_response=True)
        self._manager = server.session_manager
        self._started: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started, self._stop = asyncio.Event(), asyncio.Event()
            self._task = asyncio.create_task(self._run(self._started, self._stop))
        await self._started.wait()

    async def _run(self, started: asyncio.Event, stop: asyncio.Event) -> None:
        async with self._manager.run():
            started.set()
            await stop.wait()

    async def handle(self, scope: dict[str, Any], body: bytes, send: Send) -> None:
        """Serve one HTTP request (``scope`` as ASGI has it, with its whole ``body``)."""
        await self._ensure_started()
        done = asyncio.Event()
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            done.set()

    async def close(self) -> None:
        """End the session manager (if it was started)."""
        if self._stop is not None and self._task is not None:
            self._stop.set()
            await self._task


def asgi_scope(
    method: str, path: str, query: str, headers: list[tuple[str, str]], client: str, port: int
) -> dict[str, Any]:
    """The ASGI ``http`` scope of a request, for :meth:`HttpEndpoint.handle`."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": (client, 0),
        "server": ("127.0.0.1", port),
    }
