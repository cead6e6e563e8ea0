"""Rank 0 writes the job's progress into its TrainJob's ``status.trainerStatus``.

Standard library only. Kubeflow Trainer v2.2+ (feature gate ``TrainJobStatus``)
gives every trainer container three variables: ``KUBEFLOW_TRAINER_SERVER_URL``
(the controller's HTTPS status endpoint of this TrainJob),
``KUBEFLOW_TRAINER_SERVER_CA_CERT`` (the CA file that signs its certificate)
and ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (a projected service account token file,
re-read before each request since the kubelet rotates it). When all three are
set, rank 0 posts ``{"trainerStatus": {progressPercentage,
estimatedRemainingSeconds, metrics, lastUpdatedTime}}`` from its own
``progress`` and ``metric`` lines (``report(step, total=...)``, a tqdm bar,
``report(loss=...)``): at most once every :data:`EVERY` seconds
(``DISTRAIN_TRAINER_STATUS_EVERY`` overrides it), from a thread of its own so
training never waits, and once more when the run ends. Without the variables
nothing happens. A failing endpoint prints one warning and is tried again at
the next interval; it never raises into training.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from typing import Any, Final

from . import report
from .observed import Observed

ENV_URL: Final = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA: Final = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TOKEN: Final = "KUBEFLOW_TRAINER_SERVER_TOKEN"
ENV_EVERY: Final = "DISTRAIN_TRAINER_STATUS_EVERY"
#: Default seconds between two posts (the Trainer's status server takes 5 requests a
#: second for the whole cluster: a job posts rarely).
EVERY: Final = 10.0
#: Seconds a post may take before it is abandoned.
TIMEOUT: Final = 5.0
#: The Trainer's limits on ``metrics``: items, and characters of a name or a value.
MAX_METRICS: Final = 256
MAX_CHARS: Final = 64


def endpoint(environ: Any = None) -> tuple[str, str, str] | None:
    """(url, CA file, token file) when the Trainer's status endpoint is in this pod; else None."""
    env = os.environ if environ is None else environ
    values = (env.get(ENV_URL, ""), env.get(ENV_CA, ""), env.get(ENV_TOKEN, ""))
    return values if all(values) else None


def _value(number: float) -> str:
    text = f"{number:.6g}"
    return text[:MAX_CHARS]


class Progress:
    """The latest progress and metrics of rank 0, fed with protocol lines (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done: int | None = None
        self.total: int | None = None
        self.metrics: dict[str, float] = {}
        self.step: int | None = None
        self._first: tuple[float, int] | None = None  # (monotonic time, done) of the first line
        self._rate: float | None = None  # steps a second since the first line
        self.changed = False

    def observe(self, seen: Observed) -> None:
        """Take one protocol line (see :func:`.report.add_observer`): rank 0's ``progress``
        and ``metric`` lines count."""
        if seen.rank != 0:
            return
        with self._lock:
            if seen.kind == "progress" and seen.step is not None and seen.total is not None:
                self._progress(seen.step, seen.total)
            elif seen.kind == "metric":
                for name, value in seen.values.items():
                    if name:
                        self.metrics[name[:MAX_CHARS]] = value
                if seen.step is not None:
                    self.step = seen.step
                self.changed = True

    def _progress(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._first is None or done < self._first[1] or total != self.total:
            self._first, self._rate = (now, done), None
        elif now > self._first[0] and done > self._first[1]:
            self._rate = (done - self._first[1]) / (now - self._first[0])
        self.done, self.total, self.changed = done, total, True

    def status(self) -> dict[str, Any]:
        """The ``trainerStatus`` object of what was observed so far."""
        with self._lock:
            out: dict[str, Any] = {}
            if self.done is not None and self.total:
                done = min(self.done, self.total)
                out["progressPercentage"] = int(100 * done // self.total)
                if done >= self.total:
                    out["estimatedRemainingSeconds"] = 0
                elif self._rate:
                    out["estimatedRemainingSeconds"] = math.ceil((self.total - done) / self._rate)
            metrics = [{"name": k, "value": _value(v)} for k, v in self.metrics.items()]
            if self.step is not None:
                metrics.insert(0, {"name": "step", "value": str(self.step)})
            if metrics:
                out["metrics"] = metrics[:MAX_METRICS]
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            out["lastUpdatedTime"] = stamp
            self.changed = False
            return out


class Writer:
    """Posts :class:`Progress` to the endpoint at a bounded rate, from its own thread."""

    def __init__(self, url: str, ca_file: str, token_file: str, every: float) -> None:
        self.url, self.ca_file, self.token_file, self.every = url, ca_file, token_file, every
        self.progress = Progress()
        self.posts = 0
        self.failures = 0
        self._warned = False
        self._stop = threading.Event()
        self._post_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name="distrain-trainer-status", daemon=True
        )
        self._context: ssl.SSLContext | None = None

    def start(self) -> None:
        report.add_observer(self.progress.observe)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.progress.changed:
                self.post()

    def post(self) -> bool:
        """Send the current status once; False (after one warning per run) when it failed."""
        with self._post_lock:
            try:
                if self._context is None:
                    self._context = ssl.create_default_context(cafile=self.ca_file)
                with open(self.token_file, encoding="utf-8") as fh:
                    token = fh.read().strip()
                body = json.dumps({"trainerStatus": self.progress.status()}).encode()
                request = urllib.request.Request(
                    self.url,
                    data=body,
                    method="POST",
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                    },
                )
                with urllib.request.urlopen(request, timeout=TIMEOUT, context=self._context) as r:
                    r.read()
            except Exception as exc:  # the endpoint must never break training
                self.failures += 1
                self.progress.changed = True  # sent again at the next interval
                if not self._warned:
                    self._warned = True
                    detail = f"{type(exc).__name__}: {exc}"
                    if hasattr(exc, "read"):
                        detail += " " + exc.read(300).decode("utf-8", "replace")
                    message = f"cannot write the TrainJob's trainerStatus to {self.url}: {detail}"
                    print(
                        f"distrain: warning: {message} (training goes on)",
                        file=sys.stderr,
                        flush=True,
                    )
                return False
            self.posts += 1
            return True

    def stop(self) -> None:
        """Stop the thread and post the final status (when anything changed since the last)."""
        self._stop.set()
        self._thread.join(timeout=TIMEOUT)
        if self.progress.changed:
            self.post()


_writer: Writer | None = None


def start(rank: int) -> Writer | None:
    """On rank 0 in a pod with the Trainer's status endpoint, start writing; else None."""
    global _writer
    found = endpoint()
    if rank != 0 or found is None or _writer is not None:
        return None
    try:
        every = float(os.environ.get(ENV_EVERY) or EVERY)
    except ValueError:
        every = EVERY
    _writer = Writer(*found, every=max(every, 0.1))
    _writer.start()
    return _writer


def stop() -> None:
    """Post the final status and stop (the run is ending)."""
    global _writer
    if _writer is not None:
        _writer.stop()
        _writer = None
