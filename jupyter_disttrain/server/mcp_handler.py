"""``/disttrain/mcp``: the MCP tools over streamable HTTP, behind the server's own auth.

The handler authenticates (token or cookie with XSRF, as every jupyter_server API)
and asks the authorizer for ``read`` on the ``disttrain`` resource, then hands the
request to :class:`~jupyter_disttrain.mcp.http.HttpEndpoint`. What the tools may
change is the server's configuration: ``c.DisttrainMCP.allow_run = True`` and
``c.DisttrainMCP.allow_stop = True`` (read-only by default).
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..mcp import Permissions, build_server
from ..mcp.http import HttpEndpoint, Message, asgi_scope
from ..service import JobService
from .handlers import AUTH_RESOURCE


class McpHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def endpoint(self) -> HttpEndpoint:
        endpoint: HttpEndpoint = self.settings["disttrain_mcp"]
        return endpoint

    async def _serve(self) -> None:
        request = self.request
        port = int((request.host or "").rpartition(":")[2] or 80)
        scope = asgi_scope(
            request.method or "GET",
            "/mcp",
            request.query,
            list(request.headers.get_all()),
            request.remote_ip or "",
            port,
        )

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.set_status(message["status"])
                self.clear_header("Content-Type")
                for key, value in message.get("headers", []):
                    self.add_header(key.decode("latin-1"), value.decode("latin-1"))
            elif message["type"] == "http.response.body":
                self.write(message.get("body", b""))
                if message.get("more_body"):
                    await self.flush()

        await self.endpoint.handle(scope, request.body, send)
        if not self._finished:
            self.finish()

    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self._serve()

    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self._serve()

    @web.authenticated
    @authorized
    async def delete(self) -> None:
        await self._serve()


def permissions_of(config: Any) -> Permissions:
    """``DisttrainMCP.allow_run`` / ``allow_stop`` from the server's configuration."""
    section = config.get("DisttrainMCP", {}) if hasattr(config, "get") else {}
    return Permissions(
        run=bool(section.get("allow_run", False)), stop=bool(section.get("allow_stop", False))
    )


def setup_mcp(web_app: Any, config: Any) -> HttpEndpoint:
    """Serve the MCP tools at ``BASE/disttrain/mcp``; returns the endpoint (to close)."""
    endpoint = HttpEndpoint(build_server(JobService(), permissions_of(config)))
    web_app.settings["disttrain_mcp"] = endpoint
    path = url_path_join(web_app.settings["base_url"], "disttrain", "mcp")
    web_app.add_handlers(".*$", [(path, McpHandler)])
    return endpoint
