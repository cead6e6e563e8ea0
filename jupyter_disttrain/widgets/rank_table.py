"""The worker table: one HTML row per rank, from a monitor snapshot (pure).

DOM contract (read by the browser test): ``table.distrain-ranks``; each row
``tr.distrain-rank-row`` with ``data-rank``, ``data-state``, ``data-node``
and ``data-step``, state classes ``distrain-state-<state>``, and
``distrain-failed`` / ``distrain-first-failure`` / ``distrain-straggler``
where they apply; each cell ``td[data-col=<column>]``. Resource columns
``cpu`` and ``mem`` (``gpu`` and ``gpu_mem`` only when some rank has a GPU)
show ``—`` for a figure never read; a rank whose CPU or memory is far above
the others' has ``distrain-outlier`` and says so in its ``title``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..monitor import RankRow, Snapshot, resource_outliers
from ..monitor.scale import differing, summarised
from ..monitor.text import exit_text, lost_peer_text
from ..monitor.usage import pct
from ..units import format_bytes
from .text import ago, esc, rate, state_class

__all__ = ["COLUMNS", "GPU_COLUMNS", "columns", "rank_table_html", "shown_ranks", "summary_html"]

#: ``(data-col, header)`` of each column, in order.
COLUMNS = (
    ("rank", "rank"),
    ("node", "node"),
    ("host", "host / pod"),
    ("state", "state"),
    ("restarts", "restarts"),
    ("step", "step"),
    ("rate", "steps/s"),
    ("cpu", "CPU"),
    ("mem", "memory"),
    ("heard", "last heard"),
    ("exit", "exit / reason"),
)
#: Shown after ``mem`` when any rank has GPU figures.
GPU_COLUMNS = (("gpu", "GPU"), ("gpu_mem", "GPU memory"))
#: What a table shows for a figure never read.
ABSENT = "—"


def columns(snap: Snapshot) -> tuple[tuple[str, str], ...]:
    """The columns for ``snap``: :data:`COLUMNS`, with :data:`GPU_COLUMNS` if any rank has a GPU."""
    if not any(
        r["gpu_util_pct"] is not None or r["gpu_mem_bytes"] is not None for r in snap["ranks"]
    ):
        return COLUMNS
    at = [col for col, _ in COLUMNS].index("mem") + 1
    return (*COLUMNS[:at], *GPU_COLUMNS, *COLUMNS[at:])


def memory_text(used: int | None, limit: int | None) -> str:
    """``512.0 MB``, ``512.0 MB / 2.0 GB`` under a limit, ``—`` when never read."""
    if used is None:
        return ABSENT
    return format_bytes(used) + ("" if limit is None else f" / {format_bytes(limit)}")


def shown_ranks(snap: Snapshot, max_rows: int) -> list[RankRow]:
    """The rows to show: all, or ranks needing attention first, then the rest in order."""
    rows = snap["ranks"]
    if len(rows) <= max_rows:
        return rows
    lagging = set(snap["stragglers"])
    first = snap["first_failure"]
    urgent = {
        r["rank"]
        for r in rows
        if r["state"] not in ("Running", "Succeeded")
        or r["rank"] in lagging
        or (first is not None and r["rank"] == first["rank"])
    }
    rest = [r for r in rows if r["rank"] not in urgent]
    keep = {r["rank"] for r in [*(r for r in rows if r["rank"] in urgent), *rest][:max_rows]}
    return [r for r in rows if r["rank"] in keep]


def rank_table_html(snap: Snapshot, *, max_rows: int = 64, opened: Sequence[int] = ()) -> str:
    """``<table class="distrain-ranks">`` for ``snap`` (at most ``max_rows`` rows, then a count).

    A job of more than :data:`~..monitor.scale.SUMMARY_AT` ranks reads as a
    summary (:func:`summary_html`) over a table of the ranks that differ and
    the ranks ``opened`` on demand.
    """
    if summarised(len(snap["ranks"])):
        return summary_html(snap, opened)
    return _table(snap, shown_ranks(snap, max_rows))


def summary_html(snap: Snapshot, opened: Sequence[int] = ()) -> str:
    """A large job's ranks: a count per state, each state's ranks as ranges, the slow ranks
    named, then rows for the ranks that differ and those ``opened`` (``tr.distrain-opened``).

    DOM: ``div.distrain-rank-summary`` with ``data-ranks``; ``.distrain-state-count``
    per state (``data-state``, ``data-count``); ``li.distrain-state-range`` per state
    with ``data-state`` and the ranges as text; ``.distrain-slow`` the slow ranks' sentence.
    """
    rows = snap["ranks"]
    counts = "".join(
        f'<span class="distrain-state-count distrain-badge {state_class(g["state"])}" '
        f'data-state="{esc(g["state"])}" data-count="{g["count"]}">'
        f"{g['count']} {esc(g['state'])}</span> "
        for g in snap["summary"]
    )
    items = "".join(
        f'<li class="distrain-state-range" data-state="{esc(g["state"])}">'
        f"{'rank' if g['count'] == 1 else 'ranks'} {esc(g['ranks'])} {esc(g['state'])} "
        f'<span class="distrain-nodes">(node{"s" if "," in g["nodes"] or "-" in g["nodes"] else ""}'
        f" {esc(g['nodes'])})</span></li>"
        for g in snap["summary"]
    )
    slow = snap["slow_line"]
    shown_above = slow == snap["diagnosis"]  # the header says it already
    slow_html = (
        f'<div class="distrain-slow">{esc(slow[0].upper() + slow[1:])}</div>'
        if slow and not shown_above
        else ""
    )
    first = snap["first_failure"]
    marked = [r["rank"] for r in snap["slow"]] + snap["stragglers"]
    marked += [] if first is None else [first["rank"]]
    listed = {r["rank"] for r in differing(rows, marked)}
    wanted = set(opened) | listed
    shown = [r for r in rows if r["rank"] in wanted]
    table = _table(snap, shown, set(opened) - listed) if shown else ""
    return (
        f'<div class="distrain-rank-summary" data-ranks="{len(rows)}">'
        f'<div class="distrain-state-counts">{counts}</div>'
        f'<ul class="distrain-state-ranges">{items}</ul>{slow_html}</div>{table}'
    )


def _table(snap: Snapshot, shown: list[RankRow], opened: set[int] | None = None) -> str:
    """The table of the ``shown`` rows (``opened``: rows asked for, marked so)."""
    lagging = set(snap["stragglers"])
    slow = {r["rank"]: f"slow: {r['factor']:.1f}x the median step time" for r in snap["slow"]}
    first = snap["first_failure"]
    first_rank = None if first is None else first["rank"]
    cols = columns(snap)
    outliers = resource_outliers(snap["ranks"])
    head = "".join(f'<th data-col="{col}">{esc(title)}</th>' for col, title in cols)
    body = [
        _row(
            r,
            r["rank"] == first_rank,
            r["rank"] in lagging,
            outliers.get(r["rank"], ""),
            cols,
            lost_peer_text(r, snap["cause"]),
            opened is not None and r["rank"] in opened,
            slow.get(r["rank"], ""),
        )
        for r in shown
    ]
    hidden = len(snap["ranks"]) - len(shown)
    if hidden and opened is None:
        counts: dict[str, int] = {}
        visible = {r["rank"] for r in shown}
        for r in snap["ranks"]:
            if r["rank"] not in visible:
                counts[r["state"]] = counts.get(r["state"], 0) + 1
        states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        body.append(
            f'<tr class="distrain-more"><td colspan="{len(cols)}">'
            f"… {hidden} more ranks ({esc(states)})</td></tr>"
        )
    return (
        f'<table class="distrain-ranks" data-ranks="{len(snap["ranks"])}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _row(
    r: RankRow,
    first_failure: bool,
    straggler: bool,
    outlier: str,
    cols: tuple[tuple[str, str], ...],
    lost_peer: str = "",
    opened: bool = False,
    slow: str = "",
) -> str:
    classes = ["distrain-rank-row", state_class(r["state"])]
    if opened:
        classes.append("distrain-opened")
    if r["state"] == "Failed":
        classes.append("distrain-failed")
    if first_failure:
        classes.append("distrain-first-failure")
    if straggler or slow:
        classes.append("distrain-straggler")
    if outlier:
        classes.append("distrain-outlier")
    step = "" if r["step"] is None else str(r["step"])
    cells = {
        "rank": str(r["rank"]),
        "node": str(r["node"]),
        "host": r["pod"] or r["host"] or "-",
        "state": f'<span class="distrain-badge {state_class(r["state"])}">{esc(r["state"])}</span>',
        "restarts": str(r["restarts"]),
        "step": step or "-",
        "rate": "stalled" if r["stalled"] else rate(r["step_rate"]),
        "cpu": ABSENT if r["cpu_pct"] is None else pct(r["cpu_pct"]),
        "mem": memory_text(r["rss_bytes"], r["mem_limit_bytes"]),
        "gpu": ABSENT if r["gpu_util_pct"] is None else pct(r["gpu_util_pct"]),
        "gpu_mem": memory_text(r["gpu_mem_bytes"], None),
        "heard": ago(r["silent_s"]),
        # a paused rank's place is said once, in the header; its badge says Paused
        "exit": "" if r["state"] == "Paused" else exit_text(r),
    }
    shown = {col: esc(text) for col, text in cells.items()}
    shown["state"] = cells["state"]
    if lost_peer:  # the peer's end in plain words; the backend's raw text behind a disclosure
        shown["exit"] = (
            f'<details class="distrain-lost-peer"><summary>{esc(lost_peer)}</summary>'
            f"{esc(r['reason'])}</details>"
        )
    tds = "".join(f'<td data-col="{col}">{shown[col]}</td>' for col, _ in cols)
    why = "first failing rank" if first_failure else ""
    why = why or ("straggler: far behind the median step" if straggler else "")
    why = why or slow
    why = "; ".join(p for p in (why, outlier) if p)
    title = f' title="{esc(why)}"' if why else ""
    return (
        f'<tr class="{" ".join(classes)}" data-rank="{r["rank"]}" data-state="{esc(r["state"])}" '
        f'data-node="{r["node"]}" data-step="{step}"{title}>{tds}</tr>'
    )
