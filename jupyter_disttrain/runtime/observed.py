"""What rank 0's own readers of protocol lines take: one line's fields, read once.

Rank 0's metrics endpoint (:mod:`.metrics_server`) and its ``trainerStatus``
writer (:mod:`.trainer_status`) observe the protocol lines rank 0 writes and
relays (:func:`.report.add_observer`). A line rank 0 writes itself is handed
over as the fields it signed, never read back; a line another rank sent is
verified with the job key and parsed once in :func:`.report.write_lines`,
whatever the number of observers. Both become an :class:`Observed`: the
fields the observers use, of their types (a metric value that is no number
is left out, as is a step or total that is no integer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import jobkey
from .numbers import is_number
from .protocol import signed_fields


@dataclass(frozen=True)
class Observed:
    """One protocol line as rank 0's observers read it.

    ``values``: a ``metric`` line's numeric values by name; ``total``: a
    ``progress`` line's positive total, else None.
    """

    kind: str
    rank: int
    step: int | None = None
    total: int | None = None
    values: dict[str, float] = field(default_factory=dict)


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def observed(kind: str, rank: object, fields: Mapping[str, Any]) -> Observed | None:
    """The :class:`Observed` of a line's ``kind``, ``rank`` and other ``fields``; None when
    ``rank`` is not a rank."""
    who = _integer(rank)
    if who is None:
        return None
    values = fields.get("values")
    numbers = {
        str(name): float(value)
        for name, value in (values.items() if isinstance(values, Mapping) else ())
        if is_number(value)
    }
    total = _integer(fields.get("total"))
    return Observed(
        kind=kind,
        rank=who,
        step=_integer(fields.get("step")),
        total=total if total is not None and total > 0 else None,
        values=numbers,
    )


def from_line(line: str, signer: jobkey.Signer | None) -> Observed | None:
    """The :class:`Observed` of another rank's protocol line when the job key signed it."""
    body = signed_fields(line, signer)
    if body is None or not isinstance(body.get("kind"), str):
        return None
    return observed(body["kind"], body.get("rank"), body)
