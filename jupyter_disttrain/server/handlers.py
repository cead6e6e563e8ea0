"""Thin tornado handlers of ``/disttrain/api/...``: parse, call the manager in a thread, write.

* ``GET  /disttrain/api/jobs``: :class:`~.views.JobListJSON`
* ``GET  /disttrain/api/jobs/BACKEND/NAME``: :class:`~.views.JobJSON` with its detail
* ``POST /disttrain/api/jobs/BACKEND/NAME/stop``: :class:`~.views.StopJSON`
* ``GET  /disttrain/api/jobs/BACKEND/NAME/logs?rank=R|all&tail=N``: :class:`~.views.LogsJSON`

Errors answer ``{"message": ...}`` with 404 (unknown backend or job), 400 (bad
query) or 502 (the backend refused or could not be reached).

Authorization goes through jupyter_server's authorizer with the resource
``disttrain``: listing, detail and logs need ``read``, stop needs ``write``
(a read-only user sees jobs but gets 403 on stop).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.ioloop import IOLoop

from ..backends.base import BackendError, JobNotFound
from ..service.namespace import StopRefused
from .manager import JobManager

T = TypeVar("T")
NAME = r"(?P<backend>[a-z0-9-]+)/(?P<name>[a-z0-9-]+)"


#: The resource name jupyter_server's authorizer is asked about.
AUTH_RESOURCE = "disttrain"


class _Base(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def manager(self) -> JobManager:
        manager: JobManager = self.settings["disttrain_manager"]
        return manager

    async def call(self, func: Callable[..., T], *args: Any) -> T | None:
        """Run a (blocking) manager call off the event loop; errors become JSON answers."""
        try:
            return await IOLoop.current().run_in_executor(None, func, *args)
        except JobNotFound as exc:
            self._fail(404, str(exc))
        except StopRefused as exc:  # RBAC: the job is read-only for this user
            self._fail(403, str(exc))
        except BackendError as exc:
            self._fail(502, str(exc))
        return None

    def _fail(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish(json.dumps({"message": message}))

    def answer(self, data: Any) -> None:
        self.finish(json.dumps(data, allow_nan=False))


class JobsHandler(_Base):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        data = await self.call(self.manager.list_jobs)
        if data is not None:
            self.answer(data)


class NamespaceHandler(_Base):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        data = await self.call(self.manager.namespace)
        if data is not None:
            self.answer(data)


class JobHandler(_Base):
    @web.authenticated
    @authorized
    async def get(self, backend: str, name: str) -> None:
        data = await self.call(self.manager.job, backend, name)
        if data is not None:
            self.answer(data)


class StopHandler(_Base):
    @web.authenticated
    @authorized
    async def post(self, backend: str, name: str) -> None:
        data = await self.call(self.manager.stop, backend, name)
        if data is not None:
            self.answer(data)


class LogsHandler(_Base):
    @web.authenticated
    @authorized
    async def get(self, backend: str, name: str) -> None:
        try:
            rank = _optional_int(self.get_query_argument("rank", ""), "rank")
            tail = _optional_int(self.get_query_argument("tail", "500"), "tail")
        except ValueError as exc:
            self._fail(400, str(exc))
            return
        data = await self.call(self.manager.logs, backend, name, rank, tail)
        if data is not None:
            self.answer(data)


def _optional_int(text: str, what: str) -> int | None:
    if text in ("", "all"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} must be a whole number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"{what} must be 0 or more, got {value}")
    return value


def setup_handlers(web_app: Any, manager: JobManager) -> None:
    """Register the API under the server's base URL."""
    web_app.settings["disttrain_manager"] = manager
    base = url_path_join(web_app.settings["base_url"], "disttrain", "api", "jobs")
    web_app.add_handlers(
        ".*$",
        [
            (base, JobsHandler),
            (
                url_path_join(web_app.settings["base_url"], "disttrain", "api", "namespace"),
                NamespaceHandler,
            ),
            (url_path_join(base, NAME, "stop"), StopHandler),
            (url_path_join(base, NAME, "logs"), LogsHandler),
            (url_path_join(base, NAME), JobHandler),
        ],
    )
