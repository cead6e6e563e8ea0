"""What a job's lines say reaches the server's answers as data only (a real jupyter_server)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain.backends.local import jobdir

from .jobdirs import line, write_job

Fetch = Callable[..., Awaitable[Any]]


def strict_json(body: bytes) -> Any:
    """Parse as a browser's JSON.parse would: NaN and Infinity are not JSON."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} in the answer")

    return json.loads(body, parse_constant=refuse)


async def get(jp_fetch: Fetch, *path: str, **params: str) -> Any:
    reply = await jp_fetch("disttrain", "api", "jobs", *path, params=params)
    assert reply.code == 200
    return strict_json(reply.body)


async def settle(jp_fetch: Fetch, *path: str, ok: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + 20
    answer = await get(jp_fetch, *path)
    while not ok(answer) and time.monotonic() < deadline:
        answer = await get(jp_fetch, *path)
    assert ok(answer), answer
    return answer


class Recorder(BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP listener on 127.0.0.1 that records every request it receives."""
    seen: list[str] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


async def test_a_checkpoint_uri_in_a_line_is_never_requested(
    jp_fetch: Fetch, job_home: Path, listener: tuple[str, list[str]]
) -> None:
    base, seen = listener
    uri = f"{base}/probe-dir/step-4"
    write_job("probed", nodes=1, nproc=2, steps=5, checkpoint_uri=uri)
    await get(jp_fetch)
    job = await settle(jp_fetch, "local", "probed", ok=lambda j: j["step"] == 4)
    assert job["detail"]["checkpoints"] == [
        {
            "step": 4,
            "uri": uri,
            "bytes": 1234,
            "rank": 0,
            "t": job["detail"]["checkpoints"][0]["t"],
            "status": "reported",
        }
    ]
    await get(jp_fetch)
    await get(jp_fetch, "local", "probed")
    assert seen == []


async def test_non_finite_numbers_never_reach_the_answers(jp_fetch: Fetch, job_home: Path) -> None:
    created = time.time() - 30
    infinite = line("metric", 0, math.inf, step=0, values={"loss": 1.0})
    write_job("odd-times", nodes=1, nproc=1, steps=0, created=created, first_lines=[infinite])
    write_job("plain", nodes=1, nproc=1, steps=3)
    listing = await settle(jp_fetch, ok=lambda a: len(a["jobs"]) == 2)
    assert {j["name"] for j in listing["jobs"]} == {"odd-times", "plain"}
    assert all(j["error"] == "" for j in listing["jobs"])
    odd = await settle(jp_fetch, "local", "odd-times", ok=lambda j: j["detail"]["followed"])
    assert odd["first_step_s"] is None  # an infinite time is no time
    assert (await get(jp_fetch, "local", "plain"))["state"] == "Succeeded"


async def test_log_tails_are_bounded(jp_fetch: Fetch, job_home: Path) -> None:
    from jupyter_disttrain.server.manager import MAX_TAIL

    directory = write_job("chatty", nodes=1, nproc=1, steps=1)
    with open(jobdir.logs_dir(directory) / "rank-0.log", "a") as fh:
        fh.writelines(f"line {i}\n" for i in range(3 * MAX_TAIL))
    last = await get(jp_fetch, "local", "chatty", "logs", rank="0", tail="3")
    assert last["text"].splitlines() == [f"line {i}" for i in range(3 * MAX_TAIL - 3, 3 * MAX_TAIL)]
    assert last["message"] == ""
    every = await get(jp_fetch, "local", "chatty", "logs", rank="0", tail="all")
    lines = every["text"].splitlines()
    assert len(lines) == MAX_TAIL and lines[-1] == f"line {3 * MAX_TAIL - 1}"
    assert every["tail"] == MAX_TAIL
    assert every["message"] == f"at most the last {MAX_TAIL} lines shown"
