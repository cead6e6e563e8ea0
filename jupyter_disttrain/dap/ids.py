"""The Debugger panel's numbers for ranks: thread, frame and variables ids (pure).

A rank is named by its job's slot (the order this kernel first saw the job,
below :data:`MAX_SLOTS`) and its rank (below :data:`MAX_RANKS`); a frame also
by the rank's stop (counted modulo :data:`MAX_STOPS`), so each stop's frames
and variables have new ids (a client keeps nothing of the last stop). Each kind of
id lives in its own range, far above the small numbers debugpy hands out for
the kernel's own threads, frames and variables, and below 2**53 (a JavaScript
number), so the two can never collide and one id says what it names.
"""

from __future__ import annotations

from typing import Final, NamedTuple

MAX_SLOTS: Final = 1 << 8
MAX_RANKS: Final = 1 << 16
#: Frames of one rank's stack that get an id (the innermost ones).
MAX_FRAMES: Final = 1 << 10
MAX_STOPS: Final = 1 << 8
THREADS: Final = 1 << 30
FRAMES: Final = 1 << 40
VARIABLES: Final = 1 << 50
SCOPES: Final = ("locals", "globals")


class RankFrame(NamedTuple):
    """A frame of a rank: ``frame``, its index in the stack at ``stop``; ``scope`` for a
    variables id."""

    slot: int
    rank: int
    frame: int = 0
    scope: str = "locals"
    stop: int = 0


def _key(slot: int, rank: int) -> int:
    if not (0 <= slot < MAX_SLOTS and 0 <= rank < MAX_RANKS):
        raise ValueError(f"slot {slot} rank {rank} is out of range")
    return slot << 16 | rank


def thread_id(slot: int, rank: int) -> int:
    """The thread id of ``rank`` of the job in ``slot``."""
    return THREADS + _key(slot, rank)


def frame_id(slot: int, rank: int, index: int, stop: int = 0) -> int:
    """The id of frame ``index`` of that rank's stack at its ``stop``."""
    if not 0 <= index < MAX_FRAMES:
        raise ValueError(f"frame {index} is out of range")
    return FRAMES + ((stop % MAX_STOPS) << 34 | _key(slot, rank) << 10 | index)


def variables_id(slot: int, rank: int, index: int, scope: str, stop: int = 0) -> int:
    """The variables reference of ``scope`` (``locals`` or ``globals``) of that frame."""
    inner = frame_id(slot, rank, index, stop) - FRAMES
    return VARIABLES + (inner << 1 | SCOPES.index(scope))


def of_thread(number: object) -> RankFrame | None:
    """The rank a thread id names; None for the kernel's own threads."""
    if not isinstance(number, int) or not THREADS <= number < THREADS + (1 << 24):
        return None
    key = number - THREADS
    return RankFrame(key >> 16, key & 0xFFFF)


def of_frame(number: object) -> RankFrame | None:
    """The rank frame a frame id names; None for the kernel's own frames."""
    if not isinstance(number, int) or not FRAMES <= number < FRAMES + (1 << 42):
        return None
    inner = number - FRAMES
    key = inner & ((1 << 34) - 1)
    return RankFrame((key >> 26), (key >> 10) & 0xFFFF, key & 0x3FF, stop=inner >> 34)


def of_variables(number: object) -> RankFrame | None:
    """The rank frame and scope a variables reference names; None for the kernel's own."""
    if not isinstance(number, int) or not VARIABLES <= number < VARIABLES + (1 << 43):
        return None
    inner = number - VARIABLES
    frame = of_frame(FRAMES + (inner >> 1))
    assert frame is not None
    return frame._replace(scope=SCOPES[inner & 1])
