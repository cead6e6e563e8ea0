"""Where a worker is: the Python stacks of all its threads, read without stopping it.

Standard library only (torch is read when present). The stacks are taken
from ``sys._current_frames()`` by another thread, so a main thread blocked
in C (a collective waiting for a peer, ``time.sleep``) is read as it
stands. Each thread's summary names the call it is in and the cell line
it came from: the first function it entered below the cell (wrappers
skipped), or, when the cell itself is in a C call, the call expression at
the cell line (``time.sleep``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from types import FrameType
from typing import Any, Final, TypedDict

#: Frames kept per thread (the innermost), and threads kept per rank.
MAX_FRAMES: Final = 40
MAX_THREADS: Final = 32
#: Decorator/wrapper frames skipped when naming the call a thread is in.
WRAPPERS: Final = frozenset(
    {"wrapper", "inner", "_fn", "decorate_context", "wrapped", "_wrapper", "new_func"}
)
#: ``1``: each user frame also carries its locals, shortened (``--where-locals``).
ENV_LOCALS: Final = "DISTRAIN_WHERE_LOCALS"
#: Locals kept per frame, and characters kept of each value's ``repr``.
MAX_LOCALS: Final = 24
LOCAL_CHARS: Final = 80
#: Paths of frames that are not the user's own (the runtime, the stdlib, packages).
_NOT_USER: Final = ("/site-packages/", "/dist-packages/", "/jupyter_disttrain/", "/lib/python3")
#: The flight recorder's records kept per process group (``TORCH_FR_BUFFER_SIZE``).
FLIGHT_RECORDER_SIZE: Final = 2000


class ThreadStack(TypedDict, total=False):
    """One thread: ``frames`` outermost first, each ``[file, line, function]``; with
    ``--where-locals``, ``locals`` maps a user frame's index in ``frames`` to its locals."""

    name: str
    main: bool
    frames: list[list[Any]]
    call: str
    cell_line: int | None
    locals: dict[str, dict[str, str]]


def shorten(value: Any) -> str:
    """``repr(value)`` cut to :data:`LOCAL_CHARS` characters (a failing repr says so)."""
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr failed: {type(exc).__name__}>"
    return text if len(text) <= LOCAL_CHARS else text[: LOCAL_CHARS - 3] + "..."


def frame_locals(frame: FrameType) -> dict[str, str]:
    """The first :data:`MAX_LOCALS` locals of a user frame, shortened (modules and dunders
    left out)."""
    out: dict[str, str] = {}
    for name, value in list(frame.f_locals.items()):
        if name.startswith("__") or type(value).__name__ == "module":
            continue
        out[str(name)[:64]] = shorten(value)
        if len(out) >= MAX_LOCALS:
            break
    return out


def _user_file(file: str, cell_filename: str) -> bool:
    if file.startswith("<"):
        return file == cell_filename or file.startswith("<distrain-cell")
    return not any(part in file.replace("\\", "/") for part in _NOT_USER)


class Collective(TypedDict):
    """The last collective this rank entered on the default group (flight recorder)."""

    seq: int
    op: str


def _call_text(frame: FrameType) -> str | None:
    """The callee of the call expression ``frame`` is executing, e.g. ``time.sleep``."""
    code = frame.f_code
    try:
        positions = list(code.co_positions())
        line, end_line, col, end_col = positions[frame.f_lasti // 2]
    except (IndexError, ValueError, AttributeError):
        return None
    if line is None or col is None or end_col is None or line != end_line:
        return None
    import linecache

    text = linecache.getline(code.co_filename, line)[col:end_col]
    head = text.split("(", 1)[0].strip()
    return head or None


def thread_stack(
    name: str, frame: FrameType | None, cell_filename: str, *, main: bool
) -> ThreadStack:
    """The summary of one thread whose innermost frame is ``frame``."""
    chain: list[FrameType] = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    chain.reverse()  # outermost first
    cell_at = max(
        (i for i, f in enumerate(chain) if f.f_code.co_filename == cell_filename), default=None
    )
    call = ""
    cell_line: int | None = None
    if cell_at is not None:
        cell_line = chain[cell_at].f_lineno
        below = [f for f in chain[cell_at + 1 :] if f.f_code.co_name not in WRAPPERS]
        if below:
            call = below[0].f_code.co_name
        else:
            call = _call_text(chain[cell_at]) or ""
    elif chain:
        call = chain[-1].f_code.co_name
    kept = chain[-MAX_FRAMES:]
    frames = [[f.f_code.co_filename, f.f_lineno, f.f_code.co_name] for f in kept]
    stack = ThreadStack(name=name, main=main, frames=frames, call=call, cell_line=cell_line)
    if os.environ.get(ENV_LOCALS) == "1":
        stack["locals"] = {
            str(i): frame_locals(f)
            for i, f in enumerate(kept)
            if _user_file(f.f_code.co_filename, cell_filename)
        }
    return stack


def all_stacks(cell_filename: str, *, skip: set[int] | None = None) -> list[ThreadStack]:
    """Every thread's stack but those in ``skip`` (thread idents); the main thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    out: list[ThreadStack] = []
    for ident, frame in sys._current_frames().items():
        if skip and ident in skip:
            continue
        out.append(
            thread_stack(
                names.get(ident, f"thread-{ident}"), frame, cell_filename, main=ident == main_ident
            )
        )
    out.sort(key=lambda s: (not s["main"], s["name"]))
    return out[:MAX_THREADS]


def enable_flight_recorder() -> None:
    """Ask torch to record collectives (before the group is made; the user's setting wins)."""
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(FLIGHT_RECORDER_SIZE))


_base_seq = 0


def mark_cell_start() -> None:
    """Number later collectives from here (the runtime's own set-up ones do not count)."""
    global _base_seq
    found = last_collective()
    _base_seq += found["seq"] if found is not None else 0  # FR may be off: then nothing counts


def last_collective() -> Collective | None:
    """The default group's last collective this rank entered, when torch records them.

    ``seq`` counts the cell's collectives (1 is its first).
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_initialized():
        return None
    try:
        import torch._C._distributed_c10d as c10d

        dump = json.loads(c10d._dump_fr_trace_json(True, True))  # type: ignore[attr-defined]
    except Exception:
        return None
    best = Collective(seq=0, op="")  # recording, and no collective of the cell yet
    for entry in dump.get("entries", []):
        group = entry.get("process_group") or ["", ""]
        if str(group[0]) != "0":
            continue
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int) or seq <= 0:
            continue
        if seq - _base_seq > best["seq"]:
            op = str(entry.get("profiling_name", "")).split(":")[-1]
            best = Collective(seq=seq - _base_seq, op=op)
    return best
