"""Warnings shown above a job, from its log lines (pure; kept under the monitor's lock)."""

from __future__ import annotations

from typing import Final

#: Log lines that are warnings to show above the job (the worker's, the backend's).
WARNING_PREFIXES: Final = ("distrain: warning: ", "warning: ")
MAX_WARNINGS: Final = 20


class Notices:
    """One copy of each warning the ranks or the backend printed (at most
    :data:`MAX_WARNINGS`), and one note when a line looked like a control line but was not
    believed."""

    def __init__(self) -> None:
        self._listed: dict[str, None] = {}
        self._rejected = False

    def feed(self, rank: int | None, text: str, rejected: object) -> None:
        """Take one log line of ``rank`` (``rejected``: why it was not believed, if it was
        not)."""
        if rejected and not self._rejected:  # once per job: printed text, not a command
            self._rejected = True
            self._listed.setdefault(
                f"a line of rank {rank if rank is not None else '?'} looked like a control "
                f"line but was not believed ({rejected}); it is kept as log text",
                None,
            )
        for prefix in WARNING_PREFIXES:  # one copy of what every rank warns about
            if text.startswith(prefix) and len(self._listed) < MAX_WARNINGS:
                self._listed.setdefault(text[len(prefix) :].strip(), None)

    def listed(self) -> list[str]:
        """The warnings in the order first seen."""
        return list(self._listed)
