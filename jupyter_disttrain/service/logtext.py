"""A job's logs cut to a size a viewer can show, with a sentence saying what was cut."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.base import Backend, JobNotFound, JobRecord
from ..events import TERMINAL_STATES

#: Largest ``tail`` a log request may ask for (``all`` means this many), over all ranks shown.
MAX_TAIL = 5000
#: Most characters of log text one answer carries (its end is kept).
MAX_LOG_CHARS = 2 * 1024 * 1024


@dataclass
class BoundedLogs:
    """The last ``tail`` lines of ``rank`` (None: every rank, prefixed) of a job of ``ranks``.

    ``message`` says when the text was cut or why it is empty ("" otherwise).
    """

    text: str
    message: str
    tail: int
    ranks: list[int]


def bounded_logs(
    backend: Backend, record: JobRecord, rank: int | None, tail: int | None
) -> BoundedLogs:
    """``backend``'s logs of ``record``, at most :data:`MAX_TAIL` lines and :data:`MAX_LOG_CHARS`.

    ``tail`` None (``all``) means :data:`MAX_TAIL`; for every rank at once the
    lines are shared among the ranks. A rank that printed nothing (yet, while
    the job runs) is a message, not an error; an unknown job raises :class:`JobNotFound`.
    """
    asked = tail
    ranks = list(range(record.world_size))
    budget = MAX_TAIL if rank is not None else max(1, MAX_TAIL // max(1, len(ranks)))
    tail = budget if tail is None else max(0, min(tail, budget))
    text, message = "", ""
    try:
        text = backend.logs(record.name, rank=rank, tail=tail)
    except JobNotFound as exc:  # e.g. a rank that has printed nothing yet
        message = str(exc)
    if len(text) > MAX_LOG_CHARS:
        text = text[-MAX_LOG_CHARS:].partition("\n")[2]
        message = f"showing the last {MAX_LOG_CHARS // (1024 * 1024)} MiB of output"
    elif text and (asked is None or asked > tail):
        message = f"at most the last {tail} lines{' per rank' if rank is None else ''} shown"
    if not text and not message:
        message = "no output" if record.state in TERMINAL_STATES else "no output yet"
    return BoundedLogs(text=text, message=message, tail=tail, ranks=ranks)
