"""Read NCCL, PyTorch c10d and gloo communication logs: a summary and a diagnosis.

Pure: no I/O. :class:`NcclParser` is fed every plain log line of every rank
and keeps only what the summary needs, so a line that is not about
communication costs a few substring tests and memory stays bounded.
:meth:`NcclParser.summary` returns an :class:`NcclSummary`: the NCCL version,
the transports per rank, the interfaces, the number of ranks, whether init
completed, the warning count, a failure class and one sentence of diagnosis
with the fix.

Failure classes, most likely root cause first when several are present:
``cuda-oom``, ``shm``, ``ib``, ``connection``, ``other`` (a specific
error outside those), ``timeout``; then ``other`` again for a suspect
configuration (sockets on loopback, a Docker bridge address, an IPv6
link-local address) or an NCCL error with no recognised cause; else
``none``. Errors on other ranks usually follow from the root cause (a rank
that runs out of memory makes its peers see closed connections and
timeouts), hence the order.
"""

from __future__ import annotations

from collections.abc import Iterable

from .parser import NcclParser
from .patterns import FAILURES, RAW_HEAD, RAW_TAIL
from .summary import NcclSummary, format_summary, summary_facts, summary_to_json

__all__ = [
    "FAILURES",
    "RAW_HEAD",
    "RAW_TAIL",
    "NcclParser",
    "NcclSummary",
    "format_summary",
    "summarize",
    "summary_facts",
    "summary_to_json",
]


def summarize(lines: Iterable[str]) -> NcclSummary:
    """Summarise lines (e.g. an open log file) with a fresh :class:`NcclParser`."""
    parser = NcclParser()
    for line in lines:
        parser.feed(line)
    return parser.summary()
