"""A static snapshot of a job for frontends without widgets (nbconvert, terminals, CI).

The dashboard's display bundle carries this as ``text/plain`` and
``text/html`` next to the widget view, and refreshes it when the job ends,
so a saved notebook keeps the final state even where widgets cannot render.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..monitor import JobMonitor, Snapshot, format_text, user_traceback
from ..nccl import NcclSummary
from .downsample import lttb
from .header import header_html
from .rank_table import rank_table_html
from .text import esc

__all__ = ["snapshot_html", "snapshot_text", "sparkline_svg"]

_SPARK_POINTS = 120
_SPARK_W = 180
_SPARK_H = 34
_MAX_CURVES = 4
_STATIC_CSS = (
    ".distrain-static table{border-collapse:collapse}"
    ".distrain-static td,.distrain-static th{padding:1px 8px 1px 2px;text-align:left}"
    ".distrain-static tr.distrain-failed{background:#fce8e6}"
    ".distrain-static tr.distrain-straggler,.distrain-static tr.distrain-outlier"
    "{background:#fef7e0}"
    ".distrain-static .distrain-progress{background:#e8eaed;max-width:520px}"
    ".distrain-static .distrain-progress-bar{position:absolute;top:0;bottom:0;left:0;"
    "background:#8ab4f8}"
    ".distrain-static .distrain-progress-text{position:relative;padding-left:6px}"
    ".distrain-static .distrain-badge{font-weight:600}"
)


def sparkline_svg(x: NDArray[np.float64], y: NDArray[np.float64]) -> str:
    """A small inline SVG polyline of ``y`` over ``x`` (downsampled with LTTB)."""
    xs, ys = lttb(x, y, _SPARK_POINTS) if x.size >= 2 else (x, y)
    if xs.size < 2:
        return ""
    x0, x1 = float(xs.min()), float(xs.max())
    y0, y1 = float(ys.min()), float(ys.max())
    sx = (_SPARK_W - 2) / (x1 - x0 or 1.0)
    sy = (_SPARK_H - 2) / (y1 - y0 or 1.0)
    points = " ".join(
        f"{1 + (a - x0) * sx:.1f},{_SPARK_H - 1 - (b - y0) * sy:.1f}"
        for a, b in zip(xs.tolist(), ys.tolist(), strict=True)
    )
    return (
        f'<svg width="{_SPARK_W}" height="{_SPARK_H}" viewBox="0 0 {_SPARK_W} {_SPARK_H}">'
        f'<polyline fill="none" stroke="#1a73e8" stroke-width="1.5" points="{points}"/></svg>'
    )


def snapshot_html(snap: Snapshot, monitor: JobMonitor, comms: NcclSummary | None) -> str:
    """Header, worker table, latest metrics with a sparkline of their mean, diagnosis."""
    parts = [f"<style>{_STATIC_CSS}</style>", header_html(snap), rank_table_html(snap)]
    if snap["metrics"]:
        rows = []
        for i, (name, m) in enumerate(snap["metrics"].items()):
            spark = ""
            if i < _MAX_CURVES:
                steps, means = monitor.mean_series(name)
                spark = sparkline_svg(steps, means)
            rows.append(
                f'<tr data-metric="{esc(name)}"><td>{esc(name)}</td><td>{esc(m["mean"])}</td>'
                f"<td>step {m['step']}</td><td>{spark}</td></tr>"
            )
        parts.append(
            "<table><thead><tr><th>metric</th><th>mean (latest)</th><th></th>"
            f"<th>mean by step</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
    if _has_comms(snap, comms):
        assert comms is not None
        parts.append(f"<div>communication: {esc(comms.diagnosis)}</div>")
    cause = snap["cause"]
    own = [e for e in snap["errors"] if cause is not None and e["rank"] == cause["rank"]]
    for error in (own or snap["errors"])[:1]:
        parts.append(
            f"<details><summary>rank {esc(error['rank'])}: {esc(error['type'])}: "
            f"{esc(error['message'])}</summary>"
            f"<pre>{esc(user_traceback(error['traceback']))}</pre></details>"
        )
    return f'<div class="distrain-static">{"".join(parts)}</div>'


def snapshot_text(snap: Snapshot, comms: NcclSummary | None) -> str:
    """:func:`~jupyter_disttrain.monitor.format_text` plus the communication diagnosis."""
    text = format_text(snap)
    if _has_comms(snap, comms):
        assert comms is not None
        text += f"\ncommunication: {comms.diagnosis}"
    return text


def _has_comms(snap: Snapshot, comms: NcclSummary | None) -> bool:
    """True when the communication lines name a problem the job's own reading does not.

    Not after a stop or a success, nor beside a rank's own error (the cause).
    """
    if snap["state"] in ("Stopped", "Succeeded") or snap["cause"] is not None:
        return False
    return bool(
        comms
        and comms.failure != "none"
        and comms.diagnosis
        and comms.diagnosis != snap["diagnosis"]
        and (comms.raw_lines or comms.comm_lines)
    )
