"""IPython magics: a thin argument-parsing and display layer over :mod:`jupyter_disttrain.service`.

``%%distrain`` runs the cell as a distributed job; ``%distrain_jobs``,
``%distrain_logs``, ``%distrain_stop``, ``%distrain_checkpoints`` and
``%distrain_config`` manage jobs, checkpoints and defaults. User mistakes
raise :class:`~IPython.core.error.UsageError` with a message that names the
problem and the fix.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import Any

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import display
from traitlets import Bool, Enum, Float, Int, Unicode

from .backends.base import BackendError
from .backends.local.lingering import default_linger
from .cellcheck import main_guard_note, spawn_problem
from .checkpoints.jobs import store_for
from .dap import cell_breakpoints
from .frameworks import names as framework_names
from .job import Job
from .magic_config import config_changes
from .options import JOB_OPTIONS, seconds
from .payload import CaptureError, transform_cell
from .plan_summary import manifest_summary
from .service import JobService, backend_names, default_service
from .session_list import format_sessions
from .sessions import SessionError, SessionLost
from .spec import MAX_NODES, MAX_NPROC, MAX_SECONDS, SpecError
from .textview import LiveView, format_job_table, format_namespace_table, format_runtime_table

#: Largest ``max_capture_mb``: 64 GiB of captured values.
MAX_CAPTURE_MB = 64.0 * 1024


def parse_line(magic: Callable[..., Any], line: str) -> Any:
    """A magic's options parsed as a shell reads them: quotes group words and are removed.

    ``--checkpoint-dir ""`` is an empty value (refused by the spec), not two quote marks.
    """
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(
            f"cannot read the options ({exc}): close the quote, or escape it with a backslash"
        ) from None
    return magic.parser.parse_args(argv)  # type: ignore[attr-defined]


def _job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for flags, kwargs in reversed(JOB_OPTIONS):
        func = magic_arguments.argument(*flags, **kwargs)(func)
    return func


def _check_cell(source: str) -> None:
    """UsageError for a cell that launches processes itself; a note for a main guard."""
    problem = spawn_problem(source)
    if problem:
        raise UsageError(problem)
    note = main_guard_note(source)
    if note:
        print(note)


@magics_class
class DistrainMagics(Magics):
    """Run notebook cells as distributed training jobs.

    Defaults are configurable (``c.DistrainMagics.nodes = 2`` in an IPython
    config file, or ``%distrain_config nodes=2`` in the notebook).
    """

    nodes = Int(1, min=1, max=MAX_NODES, help="Default --nodes.").tag(config=True)
    nproc = Int(1, min=1, max=MAX_NPROC, help="Default --nproc.").tag(config=True)
    backend = Enum(
        list(backend_names()), default_value=backend_names()[0], help="Default --backend."
    ).tag(config=True)
    framework = Enum(
        list(framework_names()), default_value=framework_names()[0], help="Default --framework."
    ).tag(config=True)
    timeout = Float(
        0.0, min=0.0, max=MAX_SECONDS, help="Default --timeout in seconds (0: none)."
    ).tag(config=True)
    hang_after = Float(
        300.0,
        min=0.0,
        max=MAX_SECONDS,
        help="Default --hang-after in seconds (0: never read a hang).",
    ).tag(config=True)
    max_capture_mb = Float(
        64.0,
        min=0.0,
        max=MAX_CAPTURE_MB,
        help="Largest total size of notebook values a cell may capture, in MB.",
    ).tag(config=True)
    launch_mode = Enum(
        ["fork", "exec"],
        default_value="fork",
        help="Local backend: fork workers from a warm launcher, or start fresh interpreters.",
    ).tag(config=True)
    prewarm = Bool(
        True, help="Start the local launcher when the extension loads, so the first job is fast."
    ).tag(config=True)
    linger = Float(
        default_linger(),
        min=0.0,
        help="Local backend: seconds a launcher waits, idle, for this user's next kernel after "
        "the last one using it ended (0: this kernel's launcher ends with it).",
    ).tag(config=True)
    tensorboard = Unicode(
        "",
        help="Default --tensorboard DIR (event files under DIR/NAME/rank-R); '' for the job "
        "home's tensorboard folder, 'off' for none.",
    ).tag(config=True)
    mlflow = Unicode(
        "", help="Default --mlflow tracking URI: every job becomes an MLflow run ('' for none)."
    ).tag(config=True)
    live = Enum(
        ["auto", "widget", "text", "lines", "none"],
        default_value="auto",
        help="Live output: 'auto' (dashboard in notebooks, lines in terminals), 'widget', "
        "'text', 'lines' or 'none'.",
    ).tag(config=True)

    post_mortem = Bool(
        False, help="Default --post-mortem: a rank that raises stays paused for the debugger."
    ).tag(config=True)
    autolog = Unicode(
        "all",
        help="Default --autolog: 'all', '0' (none), or libraries such as 'lightning,hf'.",
    ).tag(config=True)

    CONFIG_KEYS = (
        "nodes",
        "nproc",
        "backend",
        "framework",
        "timeout",
        "hang_after",
        "max_capture_mb",
        "launch_mode",
        "prewarm",
        "linger",
        "live",
        "tensorboard",
        "mlflow",
        "post_mortem",
        "autolog",
    )

    # -- %%distrain ------------------------------------------------------------
    @magic_arguments.magic_arguments()
    @_job_options
    @magic_arguments.argument(
        "--wait",
        action="store_true",
        help="block until the job ends; the cell's value is the result",
    )
    @magic_arguments.argument(
        "-o",
        "--output",
        default=None,
        metavar="NAME",
        help="store the Job handle in this notebook variable",
    )
    @magic_arguments.argument(
        "--session",
        default=None,
        metavar="NAME",
        help="run the cell on the live group of %%distrain_session NAME (ranks keep their state)",
    )
    @cell_magic
    def distrain(self, line: str, cell: str) -> Any:
        """Run this cell on ``--nodes`` x ``--nproc`` workers as one distributed job.

        The cell runs once per rank with the process group initialised and
        the notebook values it uses shipped along. Call ``report(step=...,
        loss=...)`` to send metrics. Rank 0's last expression is the result.
        Without ``--wait`` the handle is ``_`` at once (``-o NAME`` names it). With
        ``--session NAME`` the cell runs on that session's live ranks and blocks.
        """
        args = parse_line(self.distrain, line)
        if args.session is not None:
            return self._session_cell(args, cell)
        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"-o {args.output!r} is not a valid Python variable name")
        service = self.service
        try:
            spec = service.spec(
                args, self._defaults(), origin=service.notebook, cell=execution_count(self.shell)
            )
            plan = service.plan(
                spec,
                cell,
                self.shell.user_ns if self.shell else {},
                max_capture_bytes=int(self.max_capture_mb * 1024 * 1024),
                breakpoints=cell_breakpoints(self.shell, spec.name, cell),  # the Debugger panel's
            )
        except (SpecError, CaptureError, BackendError) as exc:
            raise UsageError(str(exc)) from None
        _check_cell(plan.payload.source)

        def started(job: Job) -> None:
            print(f"{spec.name}: {plan.payload.describe()}")
            if args.output:
                self.shell.user_ns[args.output] = job  # type: ignore[union-attr]

        view = LiveView(self._live_mode(), blocking=args.wait)
        try:
            outcome = service.run_and_follow(
                plan,
                view,
                export=args.export,
                dry_run=args.dry_run,
                wait=args.wait,
                on_start=started,
            )
        except (SpecError, BackendError) as exc:
            raise UsageError(str(exc)) from None
        if outcome.what == "exported":
            print(f"{spec.name}: wrote {args.export} (submit with: {outcome.hint})")
        elif outcome.what == "planned":
            summary = manifest_summary(plan)  # a cluster's manifest: its summary, YAML folded
            if summary is None:
                print(plan)
            else:
                display(summary)
        elif outcome.what == "interrupted":
            print(f"{spec.name}: stopped (interrupted)")
            raise KeyboardInterrupt
        elif outcome.job is not None:
            if outcome.what == "running":
                return view.cell_value(outcome.job, self.shell)
            return outcome.job.result()
        return None

    def _session_cell(self, args: Any, cell: str) -> Any:
        """``%%distrain --session NAME``: the cell on every rank of the live group."""
        given = given_job_options(args, ignore=("session",))
        if args.output:
            raise UsageError(
                "-o stores a job's handle; a session cell's value is its result: assign it, "
                "e.g. x = _ in the next cell"
            )
        if given:
            raise UsageError(
                f"{', '.join(given)} cannot be given with --session: the session's ranks and "
                f"options were set by %distrain_session start {args.session}"
            )
        try:
            _check_cell(transform_cell(cell))
        except CaptureError:
            pass  # reported when the session builds the cell's payload
        service = self.service
        try:
            session = service.session(args.session)
        except SessionError as exc:
            raise UsageError(str(exc)) from None
        try:
            return service.run_cell_and_follow(
                session,
                cell,
                LiveView(self._live_mode(), blocking=True),
                self.shell.user_ns if self.shell else {},
                max_capture_bytes=int(self.max_capture_mb * 1024 * 1024),
                breakpoints=cell_breakpoints(self.shell, session.name, cell),
            )
        except (CaptureError, SessionError) as exc:
            raise UsageError(str(exc)) from None
        except SessionLost as exc:
            print(f"{session.name}: {exc}")
            raise

    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "action", choices=["start", "list", "stop", "restart"], help="what to do"
    )
    @magic_arguments.argument("session", nargs="?", default=None, help="session name")
    @_job_options
    @magic_arguments.argument(
        "--idle-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="end the session after this long without a cell (default: never)",
    )
    @line_magic
    def distrain_session(self, line: str) -> Any:
        """Warm worker groups: ``start NAME --nodes N --nproc M``, ``list``, ``stop``, ``restart``.

        A session's ranks stay up with the process group initialised; run
        cells on them with ``%%distrain --session NAME``. Local sessions end
        with the kernel.
        """
        args = parse_line(self.distrain_session, line)
        service = self.service
        if args.action == "list":
            if args.session:
                raise UsageError("%distrain_session list takes no name")
            print(format_sessions(service.sessions.all()))
            return None
        if not args.session:
            raise UsageError(f"%distrain_session {args.action} needs a session name")
        if args.action != "start":
            given = given_job_options(args, ignore=("session", "action"))
            if given:
                raise UsageError(f"{', '.join(given)}: only %distrain_session start takes options")
        try:
            if args.action == "stop":
                print(f"{args.session}: {service.stop_session(args.session)}")
            elif args.action == "restart":
                service.restart_session(args.session)
                print(f"{args.session}: restarted (every rank's state was lost)")
            else:
                self._start_session(args)
        except (SessionError, SpecError, BackendError) as exc:
            raise UsageError(str(exc)) from None
        return None

    def _start_session(self, args: Any) -> None:
        if args.name and args.name != args.session:
            raise UsageError("--name is the session's name: write %distrain_session start NAME")
        if args.dry_run or args.export:
            raise UsageError("--dry-run and --export are for jobs; a session starts its group")
        args.name = args.session
        spec = self.service.spec(args, self._defaults())
        print(f"{spec.name}: starting {spec.nodes}x{spec.nproc} ranks ({spec.backend})...")
        try:
            session = self.service.start_session(spec, idle_timeout=args.idle_timeout)
        except KeyboardInterrupt:
            try:
                self.service.stop_session(spec.name)
            except SessionError:
                pass
            raise
        print(
            f"{spec.name}: ready; run cells with %%distrain --session {spec.name} "
            f"(rank 0 on port {session.port})"
        )

    # -- line magics -------------------------------------------------------------
    @line_magic
    def distrain_jobs(self, line: str) -> None:
        """List this kernel's jobs and every job that is still running, with diagnoses;
        ``--all``: every job of the namespace, whoever started it."""
        if line.strip() == "--all":
            self._namespace_jobs()
            return
        if line.strip():
            raise UsageError(
                "%distrain_jobs takes no arguments but --all (every job of the "
                "namespace, whoever started it)"
            )
        service = self.service
        mine = service.registered()
        listing = service.list_jobs(service.listing_backends(also=[self.backend]), diagnose=True)
        live = ("Pending", "Running", "Restarting")
        shown = [r for r in listing.records if r.name in mine or r.state in live]
        print(format_job_table(shown, set(mine), listing.diagnoses))
        for backend, error in listing.errors.items():
            print(f"{backend}: {error}")

    def _namespace_jobs(self) -> None:
        service = self.service
        listing = service.list_all(service.listing_backends(also=[self.backend]))
        print(format_namespace_table(listing.records))
        for backend, error in listing.errors.items():
            print(f"{backend}: {error}")

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("name", help="job name")
    @magic_arguments.argument("--rank", type=int, default=None, help="only this rank")
    @magic_arguments.argument("--tail", type=int, default=None, help="last N lines per rank")
    @line_magic
    def distrain_logs(self, line: str) -> None:
        """Print what a job's ranks printed."""
        args = parse_line(self.distrain_logs, line)
        if args.tail is not None and args.tail < 0:
            raise UsageError(f"--tail must be 0 or more, got {args.tail}")
        try:
            print(self.service.logs(args.name, rank=args.rank, tail=args.tail))
        except BackendError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("name", help="job name")
    @magic_arguments.argument(
        "--timeout",
        type=seconds,
        default=None,
        help="seconds to wait for the ranks' stacks (default 10; 90 for pods)",
    )
    @line_magic
    def distrain_where(self, line: str) -> None:
        """Print where a job's ranks are: their stacks, grouped, the odd ranks named."""
        args = parse_line(self.distrain_where, line)
        if args.timeout is not None and not args.timeout > 0:
            raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
        try:
            print(self.service.where(args.name, timeout=args.timeout).text())
        except BackendError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("name", help="job name")
    @magic_arguments.argument(
        "--yes", action="store_true", help="confirm stopping a job another tool or user started"
    )
    @line_magic
    def distrain_stop(self, line: str) -> None:
        """Stop a job; every process of it ends."""
        args = parse_line(self.distrain_stop, line)
        try:
            question = None if args.yes else self.service.stop_question(args.name)
            if question is not None:
                print(f"{question} (%distrain_stop {args.name} --yes)")
                return
            print(f"{args.name}: {self.service.stop(args.name)}")
        except BackendError as exc:
            raise UsageError(str(exc)) from None

    @line_magic
    def distrain_runtimes(self, line: str) -> None:
        """List the training runtimes of the configured clusters (Kubeflow Trainer)."""
        if line.strip():
            raise UsageError("%distrain_runtimes takes no arguments")
        try:
            print(format_runtime_table(self.service.runtimes()))
        except BackendError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("name", help="job name")
    @magic_arguments.argument("--backend", default=None, help="where the job runs")
    @magic_arguments.argument(
        "-o",
        "--output",
        default=None,
        metavar="NAME",
        help="store the Job handle in this notebook variable",
    )
    @line_magic
    def distrain_attach(self, line: str) -> Any:
        """Re-attach to a job (e.g. after a kernel restart): rebuild its view from the start."""
        args = parse_line(self.distrain_attach, line)
        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"-o {args.output!r} is not a valid Python variable name")
        view = LiveView(self._live_mode())
        try:
            job = self.service.attach(
                args.name, args.backend or self.backend, listeners=[view.on_event]
            )
        except BackendError as exc:
            raise UsageError(str(exc)) from None
        view.attach(job)
        if args.output:
            self.shell.user_ns[args.output] = job  # type: ignore[union-attr]
        return job

    @line_magic
    def distrain_config(self, line: str) -> None:
        """Show defaults, or set them: ``%distrain_config nodes=2 nproc=2``."""
        if not line.strip():
            for key in self.CONFIG_KEYS:
                print(f"{key} = {getattr(self, key)!r}")
            return
        changes = config_changes(self, self.CONFIG_KEYS, line)
        for key, converted in changes.items():  # all or nothing
            setattr(self, key, converted)
        print(", ".join(f"{k}={getattr(self, k)!r}" for k in changes))

    @line_magic
    def distrain_checkpoints(self, line: str) -> Any:
        """Browse checkpoints: ``%distrain_checkpoints [URI | JOB]`` (default: the last job).

        JOB is a job name or the notebook variable holding the job (``-o NAME``).

        Shows the checkpoint browser (sortable table, contents, Load / Resume
        / Delete) in a notebook, a text table elsewhere.
        """
        from .checkpoints.store import CheckpointError, format_table

        target = line.strip() or None
        known = self.service.registered()
        value = self.shell.user_ns.get(target) if self.shell and target else None
        if isinstance(value, Job):  # the variable of -o NAME
            known[str(target)] = value
        try:
            store, job = store_for(target, known)
            infos = store.list()
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
        except Exception as exc:  # the storage's own errors (credentials, network)
            raise UsageError(f"cannot read checkpoints of {target}: {exc}") from None
        if self._live_mode() == "widget":
            from .widgets.checkpoints import CheckpointBrowser

            return CheckpointBrowser(store, job=job, shell=self.shell)
        print(f"{store.uri}: {len(infos)} checkpoint(s)")
        print(format_table(infos))
        return None

    # -- helpers -----------------------------------------------------------------
    @property
    def service(self) -> JobService:
        """The kernel's job service, set up with this kernel's launch mode and notebook."""
        service = default_service()
        service.launch_mode = self.launch_mode
        service.linger = self.linger
        service.notebook = notebook_path(self.shell)
        return service

    def _defaults(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "nproc": self.nproc,
            "backend": self.backend,
            "framework": self.framework,
            "timeout": self.timeout or None,
            "hang_after": self.hang_after,
            "tensorboard": self.tensorboard or None,
            "mlflow": self.mlflow or None,
            "post_mortem": self.post_mortem,
            "autolog": self.autolog,
        }

    def _live_mode(self) -> str:
        if self.live != "auto":
            return str(self.live)
        shell = type(self.shell).__name__ if self.shell else ""
        if "ZMQ" not in shell:
            return "lines"
        from .widgets import available

        return "widget" if available(self.shell) else "text"


def given_job_options(args: Any, ignore: tuple[str, ...] = ()) -> list[str]:
    """The job options ``args`` sets to something other than their defaults, as flags."""
    out = []
    for flags, kwargs in JOB_OPTIONS:
        key = flags[-1].lstrip("-").replace("-", "_")
        if key in ignore or not hasattr(args, key):
            continue
        default = kwargs.get("default", False if kwargs.get("action") == "store_true" else None)
        if getattr(args, key) != default:
            out.append(flags[-1])
    return out


def execution_count(shell: Any) -> int | None:
    """The number the notebook shows beside the running cell (``In[N]``); None outside a shell.

    IPython advances ``shell.execution_count`` to the next cell's number
    before the running cell's code (and so its magics) runs.
    """
    count = getattr(shell, "execution_count", None)
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        return None
    return count - 1


def notebook_path(shell: Any) -> str | None:
    """The notebook this kernel serves, when the server told it (jupyter_server >= 2)."""
    namespace = getattr(shell, "user_ns", None) or {}
    path = namespace.get("__session__") or os.environ.get("JPY_SESSION_NAME")
    return str(path) if path else None


def load(ipython: Any) -> None:
    """Register the magics (the package's ``load_ipython_extension`` has warmed the
    configured backend before importing them)."""
    magics = DistrainMagics(ipython)
    ipython.register_magics(magics)
    import atexit

    atexit.register(default_service().stop_all)
    if magics.live in ("auto", "widget"):
        from .widgets import prewarm as prewarm_widgets

        prewarm_widgets(ipython)
