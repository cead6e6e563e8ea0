"""The plain-text view of a job (terminals, logs, nbconvert output): :func:`format_text`."""

from __future__ import annotations

import re

from ..events import StagingFields
from ..logbuffer import format_ranks, rank_label
from ..units import duration, format_bytes
from .cause import classify_error, user_traceback
from .phases import summary, waiting_line
from .records import CauseRow, ErrorRow, JSONFloat, ProgressRow, RankRow, Snapshot
from .scale import differing, summarised, summary_line
from .usage import pct, resource_outliers

# --------------------------------------------------------------------------- text fallback


def format_text(snap: Snapshot, *, max_rows: int = 64) -> str:
    """A plain-text summary of a snapshot: header, rank table, metrics, errors.

    With more than ``max_rows`` ranks, ranks that need attention (failed,
    stragglers, not Running/Succeeded) are shown first and the rest counted.
    """
    lines = [_header(snap)]
    lines.extend(f"  {line}" for line in phase_lines(snap))
    if snap["progress"] is not None:
        lines.append(f"  progress: {progress_text(snap['progress'])}")
    lines.extend(f"  {line}" for line in staging_lines(snap["staging"]))
    lines.extend(f"  warning: {text}" for text in snap["warnings"])
    if snap["why"]:
        lines.append(f"  {snap['why']}")
    diagnosis = shown_diagnosis(snap)
    if diagnosis:
        lines.append(f"  {diagnosis}")
    if snap["recovered"]:
        lines.append(f"  {snap['recovered']}")
    if snap["slow_line"] and snap["slow_line"] != diagnosis:
        lines.append(f"slow: {snap['slow_line']}")
    if snap["stragglers"]:
        lines.append(f"stragglers: ranks {format_ranks(snap['stragglers'])}")
    for rank, why in resource_outliers(snap["ranks"]).items():
        lines.append(f"rank {rank}: {why}")
    lines.append("")
    lines.extend(_rank_table(snap, max_rows))
    if snap["metrics"]:
        lines.append("")
        lines.append("metrics (latest per rank):")
        for name, m in snap["metrics"].items():
            spread = "" if m["ranks"] < 2 else f", min {_num(m['min'])}, max {_num(m['max'])}"
            lines.append(
                f"  {name} {_num(m['mean'])} (step {m['step']}, "
                f"{m['ranks']} rank{'s' if m['ranks'] != 1 else ''}{spread})"
            )
    if snap["checkpoints"]:
        last = snap["checkpoints"][-1]
        size = "" if last["bytes"] is None else f", {format_bytes(last['bytes'])}"
        lines.append(
            f"checkpoints: {len(snap['checkpoints'])}, latest step {last['step']}: "
            f"{last['uri']}{size}"
        )
    if snap["has_result"]:
        lines.append("result: available")
    lines.extend(_error_lines(snap["errors"], snap["cause"]))
    return "\n".join(lines)


def repeats_cause(snap: Snapshot) -> bool:
    """Whether the diagnosis only says the cause line again (then it is shown once).

    A diagnosis that adds only the cell line to the cause's reason repeats it: the
    line is in the failing rank's traceback, shown under the cause.
    """
    diagnosis, cause = snap["diagnosis"] or "", snap["cause"]
    return diagnosis == snap["why"] or (cause is not None and cause["reason"] in diagnosis)


def shown_diagnosis(snap: Snapshot) -> str | None:
    """The diagnosis to show beside the cause line: ``None`` when it repeats it."""
    return None if repeats_cause(snap) else snap["diagnosis"]


def staging_lines(rows: list[StagingFields]) -> list[str]:
    """One line per ``--data`` source still staging, or failed (staged ones are not shown).

    ``staging s3://b/x -> /data on job-master-0: 12.0 MB of 40.0 MB (30%), 3 of 10 files``.
    """
    out = []
    for row in rows:
        where = f"{row['src']} -> {row['dest']}" + (f" on {row['host']}" if row["host"] else "")
        if row["state"] == "failed":
            out.append(f"staging {where} failed: {row['message']}")
        elif row["state"] != "done":
            total = row["total"]
            done = format_bytes(row["done"])
            amount = (
                f"{done} of {format_bytes(total)} ({100 * row['done'] // total}%)"
                if total
                else done
            )
            files = (
                f", {row['files_done']} of {row['files_total']} files" if row["files_total"] else ""
            )
            out.append(
                f"staging {where}: {amount}{files}"
                if row["state"] == "copying"
                else f"staging {where}: listing the files"
            )
    return out


def phase_lines(snap: Snapshot) -> list[str]:
    """The start-up phases so far and, while the job waits in one, what it waits for."""
    rows = snap.get("phases") or []
    done = summary(rows)
    first = snap.get("first_step_s")
    if first is not None:
        done += f" (time to first step {duration(first)})"
    waiting = waiting_line(rows, snap.get("phase"))
    return [line for line in (done, waiting) if line]


def progress_text(p: ProgressRow) -> str:
    """``58 of 100 steps (58%), 1.2 steps/s, ETA 1m20s`` (``done`` once complete)."""
    parts = [f"{p['step']} of {p['total']} steps ({100 * p['fraction']:.0f}%)"]
    if p["step"] >= p["total"]:
        return f"{parts[0]}, done"
    if p["rate_per_s"] is not None:
        parts.append(f"{p['rate_per_s']:.3g} steps/s")
    if p["eta_s"] is not None:
        parts.append(f"ETA {duration(p['eta_s'])}")
    return ", ".join(parts)


def _header(snap: Snapshot) -> str:
    backend = snap["backend"] + (f"/{snap['dist_backend']}" if snap["dist_backend"] else "")
    parts = [
        f"{snap['name']} [{backend}] {snap['state']}",
        duration(snap["elapsed"]),
        f"world {snap['world_size']} ({snap['nodes']}x{snap['nproc']})",
    ]
    if snap["step"] is not None:
        parts.append(f"step {snap['step']}")
    if snap["stalled"]:
        parts.append("stalled")
    elif snap["steps_per_s"] is not None:
        parts.append(f"{snap['steps_per_s']:.3g} steps/s")
    if snap["restarts"]:
        parts.append(f"{snap['restarts']} restart{'s' if snap['restarts'] != 1 else ''}")
    return " | ".join(parts)


def _rank_table(snap: Snapshot, max_rows: int) -> list[str]:
    """The rank table; resource columns once any rank sent figures (GPU ones: a GPU's)."""
    rows = snap["ranks"]
    shown = rows
    if summarised(len(rows)):  # a count and ranges per state, then the ranks that differ
        first = snap["first_failure"]
        marked = [r["rank"] for r in snap["slow"]] + snap["stragglers"]
        shown = differing(rows, marked + ([] if first is None else [first["rank"]]))
        head = [f"ranks: {summary_line(snap['summary'])}"]
        if not shown:
            return head
        table = _table(rows, shown)
        rest = len(rows) - len(shown)
        return [*head, "ranks that differ:", *table, f"... and {rest} more ranks as summarised"]
    if len(rows) > max_rows:
        lagging = set(snap["stragglers"])
        first = snap["first_failure"]
        urgent = [
            r["rank"]
            for r in rows
            if r["state"] not in ("Running", "Succeeded")
            or r["rank"] in lagging
            or (first is not None and r["rank"] == first["rank"])
        ]
        flagged = set(urgent)
        keep = set((urgent + [r["rank"] for r in rows if r["rank"] not in flagged])[:max_rows])
        shown = [r for r in rows if r["rank"] in keep]
    out = _table(rows, shown)
    hidden = len(rows) - len(shown)
    if hidden:
        counts: dict[str, int] = {}
        visible = {r["rank"] for r in shown}
        for r in rows:
            if r["rank"] not in visible:
                counts[r["state"]] = counts.get(r["state"], 0) + 1
        states = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        out.append(f"... {hidden} more ranks ({states})")
    return out


def _table(rows: list[RankRow], shown: list[RankRow]) -> list[str]:
    """The ``shown`` rows as aligned columns (resource columns as any of ``rows`` has them)."""
    used = any(r["cpu_pct"] is not None or r["rss_bytes"] is not None for r in rows)
    gpu = any(r["gpu_util_pct"] is not None or r["gpu_mem_bytes"] is not None for r in rows)
    header = (
        "rank",
        "node",
        "host",
        "state",
        "restarts",
        "step",
        "steps/s",
        *(("cpu", "mem") if used or gpu else ()),
        *(("gpu", "gpu mem") if gpu else ()),
        "heard",
        "exit",
    )
    table = [header] + [
        (
            str(r["rank"]),
            str(r["node"]),
            r["pod"] or r["host"] or "-",
            r["state"],
            str(r["restarts"]),
            "-" if r["step"] is None else str(r["step"]),
            _rate(r),
            *(_resources(r, gpu) if used or gpu else ()),
            "-" if r["silent_s"] is None else f"{duration(r['silent_s'])} ago",
            exit_text(r, 80),
        )
        for r in shown
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in table
    ]
    return [line.rstrip() for line in out]


def _rate(r: RankRow) -> str:
    if r["stalled"]:
        return "stalled"
    return "-" if r["step_rate"] is None else f"{r['step_rate']:.3g}"


def _resources(r: RankRow, gpu: bool) -> tuple[str, ...]:
    """CPU and memory (and GPU) cells; ``—`` for a figure never read."""
    absent = "—"
    mem = absent if r["rss_bytes"] is None else format_bytes(r["rss_bytes"])
    if r["rss_bytes"] is not None and r["mem_limit_bytes"] is not None:
        mem += f"/{format_bytes(r['mem_limit_bytes'])}"
    cells = (absent if r["cpu_pct"] is None else pct(r["cpu_pct"]), mem)
    if not gpu:
        return cells
    util = absent if r["gpu_util_pct"] is None else pct(r["gpu_util_pct"])
    used = absent if r["gpu_mem_bytes"] is None else format_bytes(r["gpu_mem_bytes"])
    return (*cells, util, used)


def lost_peer_text(row: RankRow, cause: CauseRow | None) -> str:
    """``lost its peer (rank 1 failed)`` for a rank whose reason only reports a peer's end.

    "" when the row is the cause's rank, has no reason, or its reason is its own.
    """
    return lost_peer(row["rank"], row["reason"], cause)


def lost_peer(rank: int, reason: str, cause: CauseRow | None) -> str:
    """:func:`lost_peer_text` of rank ``rank`` whose reason (``Type: message``) is ``reason``."""
    if cause is None or rank == cause["rank"] or not reason:
        return ""
    error_type, _, message = reason.partition(": ")
    if classify_error(error_type, message) != "consequence":
        return ""
    return f"lost its peer (rank {cause['rank']} failed)"


def exit_text(row: RankRow, width: int = 120) -> str:
    """``exit 137: OOMKilled``, the reason alone, or the exit code alone.

    A reason longer than ``width`` characters is cut to ``width`` with ``...``.
    """
    code = "" if row["exit_code"] is None else f"exit {row['exit_code']}"
    reason = row["reason"]
    if len(reason) > width:
        reason = reason[: width - 3] + "..."
    if code and reason and f"exit code {row['exit_code']}" not in reason:
        return f"{code}: {reason}"
    return reason or code


def _error_lines(errors: list[ErrorRow], cause: CauseRow | None) -> list[str]:
    """The cause's error and traceback (from the cell on) first, then the other errors."""
    if not errors:
        return []
    own = [e for e in errors if cause is not None and e["rank"] == cause["rank"]]
    first = own[0] if own else None if cause is not None else errors[0]
    ordered = ([first] if first else []) + [e for e in errors if e is not first]
    groups: dict[tuple[str, str], list[int | None]] = {}
    for e in ordered:
        message = _ADDRESS.sub("", e["message"]).strip()  # one line for peers lost alike
        message = message if len(message) <= 160 else message[:157] + "..."
        groups.setdefault((e["type"], message), []).append(e["rank"])
    lines = ["", "errors:"]
    for (error_type, message), ranks in groups.items():
        known = [r for r in ranks if r is not None]
        who = "job" if not known else rank_label(tuple(sorted(set(known))))
        then = " (consequence)" if cause is not None and cause["rank"] not in known else ""
        lines.append(
            f"  {who}{then}: {error_type}: {message}" if message else f"  {who}{then}: {error_type}"
        )
    tb = [] if first is None else user_traceback(first["traceback"]).splitlines()
    tb = [line for line in tb if line.strip()]
    if first is not None and tb:
        lines.append(f"traceback (rank {first['rank']}):")
        lines.extend("    " + line for line in tb[-12:])
    return lines


#: ``[/path/pair.cc:553]`` and ``[127.0.0.1]:11950`` in communication errors.
_ADDRESS = re.compile(r"\s*\[[^\]\s]*\](:\d+)?")


def _num(value: JSONFloat) -> str:
    return value.lower() if isinstance(value, str) else f"{value:.6g}"
