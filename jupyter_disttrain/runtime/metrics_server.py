"""Rank 0's Prometheus endpoint: every rank's reported metrics at ``/metrics``.

Standard library only (the runtime runs in a stock image, which has no
Prometheus client). With ``DISTRAIN_METRICS_PORT`` set, rank 0 serves on
``DISTRAIN_METRICS_ADDR`` (the pod's IP, from the downward API; 127.0.0.1
when unset) the latest value of each metric of each rank, as
``disttrain_<name>{rank="R"}`` gauges, beside ``disttrain_step`` and the
``disttrain_reports_total`` counter. The other ranks' lines reach rank 0
through :mod:`.relay`. The text follows Prometheus exposition format 0.0.4.
"""

from __future__ import annotations

import http.server
import math
import os
import re
import threading
from typing import Final

from . import report
from .observed import Observed

ENV_PORT: Final = "DISTRAIN_METRICS_PORT"
ENV_ADDR: Final = "DISTRAIN_METRICS_ADDR"
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(name: str) -> str:
    """``disttrain_`` + ``name`` with every character Prometheus does not allow as ``_``."""
    return "disttrain_" + _INVALID.sub("_", name)


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Registry:
    """The latest metrics of every rank, fed with protocol lines (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, dict[int, float]] = {}
        self.names: dict[str, str] = {}  # Prometheus name -> the name given to report()
        self.steps: dict[int, int] = {}
        self.reports: dict[int, int] = {}

    def observe(self, seen: Observed) -> None:
        """Take one protocol line (see :func:`.report.add_observer`); only ``metric`` counts."""
        if seen.kind != "metric":
            return
        rank = seen.rank
        with self._lock:
            for name, value in seen.values.items():
                prom = metric_name(name)
                self.names.setdefault(prom, name)
                self.values.setdefault(prom, {})[rank] = value
            if seen.step is not None:
                self.steps[rank] = seen.step
            self.reports[rank] = self.reports.get(rank, 0) + 1

    def render(self) -> str:
        """The exposition text of everything observed so far."""
        out: list[str] = []
        with self._lock:
            for prom in sorted(self.values):
                given = self.names[prom].replace("\\", "\\\\").replace("\n", "\\n")
                out.append(f"# HELP {prom} Latest {given} reported by each rank with report().")
                out.append(f"# TYPE {prom} gauge")
                out += [
                    f'{prom}{{rank="{r}"}} {_number(v)}'
                    for r, v in sorted(self.values[prom].items())
                ]
            out += [
                "# HELP disttrain_step Step of each rank's latest report().",
                "# TYPE disttrain_step gauge",
            ]
            out += [f'disttrain_step{{rank="{r}"}} {s}' for r, s in sorted(self.steps.items())]
            out += [
                "# HELP disttrain_reports_total report() calls of each rank.",
                "# TYPE disttrain_reports_total counter",
            ]
            out += [
                f'disttrain_reports_total{{rank="{r}"}} {n}'
                for r, n in sorted(self.reports.items())
            ]
        return "\n".join(out) + "\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    registry: Registry

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        body = self.registry.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # scrapes every 15 s would fill the training log


_server: http.server.ThreadingHTTPServer | None = None


def start(rank: int) -> Registry | None:
    """On rank 0 with ``DISTRAIN_METRICS_PORT`` set, serve ``/metrics``; the registry, or None.

    A port that cannot be bound is reported on stderr and training goes on.
    """
    global _server
    port = os.environ.get(ENV_PORT)
    if rank != 0 or not port or _server is not None:
        return None
    registry = Registry()
    handler = type("Handler", (_Handler,), {"registry": registry})
    addr = os.environ.get(ENV_ADDR) or "127.0.0.1"
    try:
        _server = http.server.ThreadingHTTPServer((addr, int(port)), handler)
    except (OSError, ValueError) as exc:
        print(f"distrain: warning: no metrics endpoint on {addr}:{port}: {exc}", flush=True)
        return None
    _server.daemon_threads = True
    report.add_observer(registry.observe)
    threading.Thread(target=_server.serve_forever, name="distrain-metrics", daemon=True).start()
    print(f"distrain: Prometheus metrics at http://{addr}:{port}/metrics", flush=True)
    return registry


def stop() -> None:
    """Stop serving (the process is ending)."""
    global _server
    if _server is not None:
        _server.shutdown()
        _server.server_close()
        _server = None
