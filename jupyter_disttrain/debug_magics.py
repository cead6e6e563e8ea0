"""``%distrain_debug NAME [--rank R] [--pause]``: the debugger console of a job's paused ranks.

Argument parsing and display only: the job comes from the service
(:func:`~.service.debugging.debug_job`), the console is
:class:`~.widgets.debug_console.DebugConsole`. Mistakes raise
:class:`~IPython.core.error.UsageError` naming the problem and the fix.
"""

from __future__ import annotations

from typing import Any

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .backends.base import BackendError
from .dap import focus
from .magics import parse_line
from .service import default_service
from .service.debugging import debug_job, debug_last


@magics_class
class DebugMagics(Magics):
    """The debugger's magic."""

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("name", help="job or session name")
    @magic_arguments.argument("--rank", type=int, default=None, help="the paused rank to show")
    @magic_arguments.argument("--backend", default=None, help="where the job runs")
    @magic_arguments.argument(
        "--panel",
        action="store_true",
        help="show --rank in the kernel's Debugger panel (ranks stopped at gutter breakpoints)",
    )
    @magic_arguments.argument(
        "--pause",
        action="store_true",
        help="pause the running job's ranks (--rank R: that one) at their next cell line",
    )
    @magic_arguments.argument(
        "--last",
        action="store_true",
        help="a session: stop the ranks whose last cell failed in the frame that raised",
    )
    @line_magic
    def distrain_debug(self, line: str) -> Any:
        """Open the debugger console of a job's paused ranks (``breakpoint()``, --post-mortem)."""
        args = parse_line(self.distrain_debug, line)
        if args.panel:
            return self._panel(args)
        try:
            if args.last:
                job = debug_last(default_service(), args.name)
            else:
                job = debug_job(default_service(), args.name, args.backend)
        except (BackendError, KeyError) as exc:
            raise UsageError(f"%distrain_debug {args.name}: {exc}") from None
        if args.pause:
            self._pause(job, args.rank)
        paused = [p.rank for p in job.paused()]
        if args.rank is not None:
            if not 0 <= args.rank < job.spec.world_size:
                raise UsageError(
                    f"--rank {args.rank}: job {job.name} has ranks 0 to {job.spec.world_size - 1}"
                )
            if args.rank not in paused:
                raise UsageError(
                    f"--rank {args.rank}: rank {args.rank} of job {job.name} is not paused "
                    f"(paused ranks: {', '.join(map(str, paused)) or 'none'}); put breakpoint() "
                    "in the cell, or run it with --post-mortem"
                )
        from .widgets.debug_console import DebugConsole

        return DebugConsole(job, args.rank)  # shown as the cell's value

    def _pause(self, job: Any, rank: int | None) -> None:
        """``--pause``: pause ``rank`` (None: every rank) and say where each stopped."""
        try:
            paused = job.pause(None if rank is None else [rank])
        except BackendError as exc:
            raise UsageError(f"%distrain_debug {job.name} --pause: {exc}") from None
        for where in paused:
            print(f"{job.name}: {where.sentence()}")
        held = sorted(set(range(job.spec.world_size)) - {p.rank for p in paused})
        if rank is None and held:
            print(
                f"{job.name}: ranks {', '.join(map(str, held))} run on until they reach a line "
                "(one waiting in a collective for a paused rank pauses when it returns)"
            )

    def _panel(self, args: Any) -> None:
        """``--panel``: the Debugger panel shows ``--rank``."""
        if args.rank is None:
            raise UsageError("--panel shows one rank: add --rank R (e.g. --rank 0)")
        try:
            focus(self.shell, args.name, args.rank)
        except BackendError as exc:
            raise UsageError(f"%distrain_debug {args.name} --panel: {exc}") from None
        print(f"{args.name}: the Debugger panel shows rank {args.rank}")


def load(ipython: Any) -> None:
    """Register ``%distrain_debug``."""
    ipython.register_magics(DebugMagics(ipython))
