"""The HTTP front end (tornado): routing, auth and faults, discovery, REST verbs, streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tornado.httpserver
import tornado.iostream
import tornado.web

from .faults import RequestInfo, unauthorized
from .logs import rfc3339_nano
from .meta import ApiError, Obj, bad_request, field_selector, label_selector
from .portforward import PATH, PortForwardHandler
from .resources import PODS, Resource
from .store import ADDED, DELETED, MODIFIED, Event
from .table import table

if TYPE_CHECKING:
    from .emulator import Emulator

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0",
    "gitCommit": "emulator",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def not_served() -> ApiError:
    """The API server's answer for a path it does not serve."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


DEFAULT_WATCH_SECONDS = 1800
#: A followed log's lines go out at most this often, each time all that came meanwhile (as
#: a kubelet reads a busy container's log file in blocks): one HTTP chunk per line cost the
#: emulator and the follower a write, a wake-up and a read per line (at 8,192 ranks' lines a
#: second, more than either could do on two cores).
LOG_BATCH_SECONDS = 0.02
logger = logging.getLogger(__name__)


@dataclass
class Route:
    """What a request path names."""

    kind: str  # "version", "discovery", "resource"
    root: str = ""  # "api" or "apis"
    group: str = ""
    version: str = ""
    namespace: str | None = None
    plural: str = ""
    name: str | None = None
    subresource: str | None = None


def parse_path(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return Route("version")
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        if len(parts) <= 2:
            return Route("discovery", "api", "", parts[1] if len(parts) == 2 else "")
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) <= 3:
            return Route("discovery", "apis", *[*parts[1:], "", ""][:2])
        group, version, rest = parts[1], parts[2], parts[3:]
    route = Route("resource", parts[0], group, version)
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        route.namespace, rest = rest[1], rest[2:]
    route.plural = rest[0]
    if len(rest) > 1:
        route.name = rest[1]
    if len(rest) > 2:
        route.subresource = "/".join(rest[2:])
    return route


class CountingHTTPServer(tornado.httpserver.HTTPServer):
    """Reports each TCP connection opening and closing to :attr:`on_connection`."""

    #: Called with +1 when a connection opens and -1 when it closes.
    on_connection: Callable[[int], None] = staticmethod(lambda change: None)

    def handle_stream(self, stream: tornado.iostream.IOStream, address: tuple[Any, ...]) -> None:
        self.on_connection(+1)
        super().handle_stream(stream, address)

    def on_close(self, server_conn: object) -> None:
        self.on_connection(-1)
        super().on_close(server_conn)


#: SelfSubjectAccessReviews: served (create) though left out of discovery, which then
#: stays as it was for every test.
REVIEWS = ("resource", "authorization.k8s.io", "selfsubjectaccessreviews")


class ApiHandler(tornado.web.RequestHandler):
    """Every API path; dispatches on the parsed :class:`Route` and the HTTP method."""

    emulator: Emulator

    def initialize(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._wake: asyncio.Queue[Event | None] | None = None
        self._gone = False

    # tornado entry points
    async def get(self, *_: str) -> None:
        await self._serve("GET")

    async def post(self, *_: str) -> None:
        await self._serve("POST")

    async def put(self, *_: str) -> None:
        await self._serve("PUT")

    async def patch(self, *_: str) -> None:
        await self._serve("PATCH")

    async def delete(self, *_: str) -> None:
        await self._serve("DELETE")

    def check_xsrf_cookie(self) -> None:
        return None

    def compute_etag(self) -> None:
        return None

    def on_connection_close(self) -> None:
        self._gone = True
        if self._wake is not None:
            self._wake.put_nowait(None)

    # --- helpers -------------------------------------------------------------------------

    def arg(self, name: str, default: str | None = None) -> str | None:
        return self.get_query_argument(name, default)

    def flag(self, name: str) -> bool:
        return (self.arg(name) or "").lower() in ("true", "1")

    def send(self, obj: Any, code: int = 200) -> None:
        self.set_status(code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(obj))

    def fail(self, error: ApiError) -> None:
        self.send(error.status(), error.code)

    def body_json(self) -> Any:
        if not self.request.body:
            return None
        try:
            return json.loads(self.request.body)
        except ValueError as exc:
            raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    def warn(self, warnings: list[str]) -> None:
        for text in warnings:
            quoted = text.replace("\\", "\\\\").replace('"', '\\"')
            self.add_header("Warning", f'299 - "{quoted}"')

    # --- dispatch ------------------------------------------------------------------------

    async def _serve(self, method: str) -> None:
        emulator = self.emulator
        route = parse_path(self.request.path)
        info = self._info(method, route)
        emulator.accounting.request(
            info.verb,
            info.resource
            or (route.kind if route is not None and route.kind != "resource" else "other"),
        )
        try:
            if emulator.token is not None:
                header = self.request.headers.get("Authorization", "")
                if header != f"Bearer {emulator.token}":
                    raise unauthorized()
            refusal = emulator.faults.check(info)
            if refusal is not None:
                raise refusal
            if (delay := emulator.faults.delay(info)) > 0:
                await asyncio.sleep(delay)
            if route is None:
                raise not_served()
            if route.kind == "version":
                self.send(VERSION)
            elif (route.kind, route.group, route.plural) == REVIEWS and method == "POST":
                self.send(emulator.faults.review(self.body_json() or {}), 201)
            elif route.kind == "discovery":
                self.send(
                    emulator.discovery(route.root, route.group, route.version, self.request.host)
                )
            else:
                await self._resource(method, route, info)
        except ApiError as error:
            if not self._finished:
                self.fail(error)
        except Exception as exc:
            logger.exception("%s %s failed", method, self.request.path)
            if not self._finished:
                self.fail(ApiError(500, "InternalError", f"Internal error occurred: {exc!r}"))

    def _info(self, method: str, route: Route | None) -> RequestInfo:
        if route is None or route.kind != "resource":
            return RequestInfo(method.lower(), "", "", None, None, self.request.path)
        if method == "GET":
            verb = "watch" if self.flag("watch") else ("get" if route.name else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "delete")
            if method == "DELETE" and route.name is None:
                verb = "deletecollection"
        resource = route.plural + (f"/{route.subresource}" if route.subresource else "")
        return RequestInfo(
            verb, resource, route.group, route.namespace, route.name, self.request.path
        )

    async def _resource(self, method: str, route: Route, info: RequestInfo) -> None:
        api = self.emulator.api
        resource = self.emulator.registry.find(route.group, route.version, route.plural)
        if (
            resource is None
            or (resource.namespaced and route.namespace is None and (method != "GET" or route.name))
            or (not resource.namespaced and route.namespace)
        ):
            raise not_served()
        sub = route.subresource
        if sub is not None and sub not in resource.subresources:
            raise not_served()
        if info.verb not in resource.verbs:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        namespace = route.namespace or ""
        strict = self.arg("fieldValidation") == "Strict"
        dry = self.arg("dryRun") == "All"
        if info.verb == "watch":
            await self._watch(resource, route.namespace)
        elif info.verb == "list":
            listing = api.list_objects(
                resource,
                route.namespace,
                labels=self.arg("labelSelector"),
                fields=self.arg("fieldSelector"),
                limit=int(self.arg("limit") or 0),
                cont=self.arg("continue"),
            )
            if self._wants_table():
                listing = table(resource, listing["items"], listing["metadata"]["resourceVersion"])
            self.send(listing)
        elif info.verb == "get" and sub == "log":
            await self._logs(api.get(PODS, namespace, route.name or ""))
        elif info.verb == "get":
            obj = api.get(resource, namespace, route.name or "")
            if self._wants_table():
                obj = table(resource, [obj], obj["metadata"]["resourceVersion"])
            self.send(obj)
        elif info.verb == "create":
            created, warnings = api.create(
                resource, namespace, self.body_json(), dry_run=dry, strict=strict
            )
            self.warn(warnings)
            self.send(created, 201)
        elif info.verb == "update":
            updated, warnings = api.replace(
                resource,
                namespace,
                route.name or "",
                self.body_json(),
                subresource=sub,
                strict=strict,
            )
            self.warn(warnings)
            self.send(updated)
        elif info.verb == "patch":
            content_type = self.request.headers.get("Content-Type", "")
            updated, warnings = api.patch(
                resource,
                namespace,
                route.name or "",
                self.body_json(),
                content_type,
                subresource=sub,
                strict=strict,
            )
            self.warn(warnings)
            self.send(updated)
        elif info.verb == "delete":
            options = self.body_json() or {}
            grace = options.get("gracePeriodSeconds", self.arg("gracePeriodSeconds"))
            code, body = api.delete(
                resource,
                namespace,
                route.name or "",
                propagation=options.get("propagationPolicy") or self.arg("propagationPolicy"),
                grace=None if grace is None else int(grace),
                preconditions=options.get("preconditions"),
                dry_run=dry,
            )
            self.send(body, code)
        else:  # deletecollection
            listing = api.list_objects(
                resource,
                route.namespace,
                labels=self.arg("labelSelector"),
                fields=self.arg("fieldSelector"),
            )
            for item in listing["items"]:
                api.delete(resource, namespace, item["metadata"]["name"])
            self.send({**listing, "apiVersion": resource.api_version, "kind": resource.list_kind})

    def _wants_table(self) -> bool:
        return "as=Table" in self.request.headers.get("Accept", "")

    # --- watch ---------------------------------------------------------------------------

    async def _watch(self, resource: Resource, namespace: str | None) -> None:
        emulator = self.emulator
        match_labels = label_selector(self.arg("labelSelector"))
        match_fields = field_selector(self.arg("fieldSelector"), resource.field_selectors)
        rv = self.arg("resourceVersion")
        since = None if rv in (None, "", "0") else int(rv)
        timeout = float(self.arg("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        bookmarks = self.flag("allowWatchBookmarks")
        as_table = self._wants_table()
        loop = asyncio.get_running_loop()
        wake: asyncio.Queue[Event | None] = asyncio.Queue()
        self._wake = wake

        def listener(event: Event) -> None:
            if event.resource == resource.key and namespace in (None, event.namespace):
                loop.call_soon_threadsafe(wake.put_nowait, event)

        def matches(obj: Obj | None) -> bool:
            return (
                obj is not None
                and match_labels(obj["metadata"].get("labels") or {})
                and match_fields(obj)
            )

        def frame(kind: str, obj: Obj) -> str:
            if as_table:
                obj = table(resource, [obj], obj["metadata"]["resourceVersion"])
            return json.dumps({"type": kind, "object": obj}) + "\n"

        def render(event: Event) -> str | None:
            now_ok, was_ok = matches(event.obj), matches(event.old)
            if event.type == MODIFIED and now_ok != was_ok:
                return frame(ADDED if now_ok else DELETED, event.obj)
            if now_ok:
                return frame(event.type, event.obj)
            return None

        self.set_header("Content-Type", "application/json")
        try:
            first, unsubscribe = emulator.api.store.watch(resource.key, namespace, since, listener)
        except ApiError as error:  # 410 Expired travels as an ERROR event
            self.finish(json.dumps({"type": "ERROR", "object": error.status()}) + "\n")
            return
        deadline = time.monotonic() + timeout
        with self._streaming("watch", wake, unsubscribe):
            try:
                self.write("".join(text for e in first if (text := render(e))))
                await self.flush()
                while (left := deadline - time.monotonic()) > 0:
                    try:
                        event = await asyncio.wait_for(
                            wake.get(), min(left, emulator.bookmark_interval)
                        )
                    except asyncio.TimeoutError:
                        if bookmarks:
                            self._bookmark(resource)
                            await self.flush()
                        continue
                    if event is None:  # the client left, or the emulator stops
                        break
                    text = render(event)
                    if text:
                        self.write(text)
                        await self.flush()
                else:
                    if bookmarks:
                        self._bookmark(resource)
            except tornado.iostream.StreamClosedError:
                pass
        self._end()

    @contextlib.contextmanager
    def _streaming(
        self, kind: str, wake: asyncio.Queue[Event | None], stop: Callable[[], None]
    ) -> Iterator[None]:
        """Account for a long-lived response (``kind``: watch or log) while it is open."""
        emulator = self.emulator
        emulator.accounting.open(kind)
        emulator.streams.add(wake)
        try:
            yield
        finally:
            stop()
            emulator.streams.discard(wake)
            emulator.accounting.close(kind)

    def _bookmark(self, resource: Resource) -> None:
        rv = str(self.emulator.api.store.resource_version)
        obj = {
            "kind": resource.kind,
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": rv},
        }
        self.write(json.dumps({"type": "BOOKMARK", "object": obj}) + "\n")

    def _end(self) -> None:
        try:
            self.finish()
        except (RuntimeError, tornado.iostream.StreamClosedError):
            pass

    # --- logs ----------------------------------------------------------------------------

    async def _logs(self, pod: Obj) -> None:
        emulator = self.emulator
        assert emulator.kubelet is not None
        log = emulator.kubelet.log(pod, self.arg("container"), self.flag("previous"))
        tail = self.arg("tailLines")
        since = self.arg("sinceSeconds")
        limit = int(self.arg("limitBytes") or 0)
        stamps = self.flag("timestamps")
        follow = self.flag("follow")
        lines, closed = log.read(0)
        index = len(lines)
        if since is not None:
            cutoff = time.time() - int(since)
            lines = [line for line in lines if line[0] >= cutoff]
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) > 0 else []
        self.set_header("Content-Type", "text/plain")
        sent = 0

        def write(batch: list[tuple[float, bytes]]) -> bool:
            """Write lines; False once limitBytes is reached."""
            nonlocal sent
            data = b"".join(
                (rfc3339_nano(t).encode() + b" " if stamps else b"") + line for t, line in batch
            )
            if limit and sent + len(data) >= limit:
                self.write(data[: limit - sent])
                return False
            sent += len(data)
            self.write(data)
            return True

        if not write(lines) or not follow or closed:
            self.finish()
            return
        loop = asyncio.get_running_loop()
        wake: asyncio.Queue[Event | None] = asyncio.Queue()
        self._wake = wake

        woken = [False]  # a wake-up is on its way: lines written meanwhile go with it

        def wake_up() -> None:
            if not woken[0]:
                woken[0] = True
                loop.call_soon_threadsafe(wake.put_nowait, None)

        stop = log.listen(wake_up)
        wake_up()  # look again: the run may have ended before the listener was in place
        with self._streaming("log", wake, stop):
            try:
                await self.flush()
                while not emulator.closing:
                    await wake.get()
                    await asyncio.sleep(LOG_BATCH_SECONDS)
                    woken[0] = False
                    lines, closed = log.read(index)
                    index += len(lines)
                    if not write(lines):
                        break
                    await self.flush()
                    if closed or self._gone:
                        break
            except tornado.iostream.StreamClosedError:
                pass
        self._end()


def make_app(emulator: Emulator) -> tornado.web.Application:
    return tornado.web.Application(
        [
            (PATH, PortForwardHandler, {"emulator": emulator}),
            (r"/.*", ApiHandler, {"emulator": emulator}),
        ],
        log_function=lambda handler: None,
    )
