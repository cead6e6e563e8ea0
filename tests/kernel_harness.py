"""One harness for tests that drive a real Jupyter kernel (jupyter_client)."""

from __future__ import annotations

import os
import queue
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel


class Kernel:
    """A kernel started with jupyter_client, with helpers to run code and read iopub."""

    def __init__(self, km: KernelManager, kc: BlockingKernelClient) -> None:
        self.km = km
        self.kc = kc
        self.iopub: list[dict[str, Any]] = []

    def drain(self, timeout: float = 0.0) -> None:
        """Move published messages to :attr:`iopub`."""
        while True:
            try:
                self.iopub.append(self.kc.get_iopub_msg(timeout=timeout))
            except queue.Empty:
                return

    def execute(self, code: str, timeout: float = 120.0) -> tuple[float, dict[str, Any]]:
        """Run ``code``; seconds until its ``execute_reply``, and the reply."""
        started = time.perf_counter()
        msg_id = self.start(code)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply within {timeout} s to {code[:60]!r}")
            try:
                reply = self.kc.get_shell_msg(timeout=min(left, 0.05))
            except queue.Empty:
                self.drain()
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                elapsed = time.perf_counter() - started
                content = reply["content"]
                if content["status"] != "ok":
                    raise RuntimeError(
                        f"{content['status']}: " + "".join(content.get("traceback", []))
                    )
                return elapsed, reply

    def start(self, code: str) -> str:
        """Send ``code`` without waiting; returns the request's message id.

        With ``stop_on_error`` off: after a cell that raised, ipykernel otherwise aborts
        every request that reaches it before it stops aborting (a reply ``aborted``, no
        traceback), which a test's next cell sent right after the error reply can be.
        """
        msg_id: str = self.kc.execute(code, stop_on_error=False)
        return msg_id

    def run(self, code: str, timeout: float = 120.0) -> str:
        """Run ``code`` and return what it printed (after the kernel went idle)."""
        start = len(self.iopub)
        _, reply = self.execute(code, timeout)
        msg_id = reply["parent_header"]["msg_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.drain(0.05)
            mine = [m for m in self.iopub[start:] if m["parent_header"].get("msg_id") == msg_id]
            if any(
                m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                for m in mine
            ):
                return "".join(m["content"]["text"] for m in mine if m["msg_type"] == "stream")
        raise TimeoutError(f"kernel not idle after {code[:60]!r}")


@contextmanager
def kernel(home: str | None = None, env: dict[str, str] | None = None) -> Iterator[Kernel]:
    """A fresh python3 kernel (its own ``DISTRAIN_HOME``, ``env`` added), shut down on exit."""
    env = {**os.environ, **(env or {})}
    env["DISTRAIN_HOME"] = home or tempfile.mkdtemp(prefix="distrain-kernel-home-")
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    try:
        yield Kernel(km, kc)
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=False)
