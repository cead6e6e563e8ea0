"""A DAP client of a real kernel: ``debug_request`` on the control channel, ``debug_event``
on iopub (what JupyterLab's Debugger panel sends and reads)."""

from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Callable
from typing import Any

from tests.kernel_harness import Kernel


class DapClient:
    """Requests with their replies; the kernel's debug events as they came."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.seq = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.read = 0  # events already read by wait_event

    def request(self, command: str, timeout: float = 120.0, **arguments: Any) -> dict[str, Any]:
        """Send one request; its reply's content (the DAP response)."""
        kc = self.kernel.kc
        message = kc.session.msg(
            "debug_request",
            {"type": "request", "seq": next(self.seq), "command": command, "arguments": arguments},
        )
        kc.control_channel.send(message)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = kc.control_channel.get_msg(timeout=0.2)
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == message["header"]["msg_id"]:
                content: dict[str, Any] = reply["content"]
                return content
        raise TimeoutError(f"no reply to {command} within {timeout} s")

    def ok(self, command: str, **arguments: Any) -> dict[str, Any]:
        """A request that must succeed; its body."""
        reply = self.request(command, **arguments)
        assert reply.get("success"), f"{command} {arguments}: {reply}"
        body: dict[str, Any] = reply.get("body") or {}
        return body

    def start(self) -> None:
        """initialize + attach + configurationDone, as JupyterLab does."""
        self.ok(
            "initialize",
            clientID="test",
            clientName="test",
            adapterID="",
            pathFormat="path",
            linesStartAt1=True,
            columnsStartAt1=True,
            supportsVariableType=True,
            supportsVariablePaging=True,
            supportsRunInTerminalRequest=True,
            locale="en",
        )
        self.ok("attach")
        self.ok("configurationDone")

    def collect(self) -> None:
        """Move the kernel's debug events to :attr:`events`."""
        self.kernel.drain(0.05)
        for message in self.kernel.iopub:
            if message["msg_type"] == "debug_event":
                self.events.append(message["content"])
        self.kernel.iopub.clear()

    def wait_event(
        self,
        match: Callable[[dict[str, Any]], bool],
        why: str,
        timeout: float,
        logs: Callable[[], str],
    ) -> dict[str, Any]:
        """The next unread event ``match`` accepts (events before it are read too)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.collect()
            for index in range(self.read, len(self.events)):
                if match(self.events[index]):
                    self.read = index + 1
                    return self.events[index]
        raise AssertionError(f"no {why} within {timeout} s; events {self.events}\n{logs()}")
