"""The MCP tools: the job service's operations, each answering bounded text.

Every tool calls :class:`~jupyter_disttrain.service.JobService` and formats what
it answers; none holds job logic. Planning is the preview: ``plan_cell`` and
``plan_script`` return the printed plan and a ``plan_token`` bound to it
(:mod:`.tokens`), and ``run_job`` runs only a plan named by such a token.
Mutating tools (:data:`MUTATING`) are listed always but refuse, naming the flag,
unless the server was made with that permission; ``stop_job`` and
``debug_send`` also need ``confirm=true``. Errors are the product's messages
(a :class:`ToolError`), never tracebacks.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from ..backends.base import BackendError, JobRecord
from ..checkpoints.store import CheckpointStore
from ..job import Job, MetricsTable
from ..options import add_job_options
from ..payload import CaptureError, Script
from ..service import JobService, namespace
from ..session_list import format_sessions
from ..sessions import SessionError
from ..spec import SpecError
from .bounds import bounded
from .tokens import PlanTokens, TokenError

F = TypeVar("F", bound=Callable[..., str])

#: Tools that change something, with the server flag that allows each.
MUTATING = {"run_job": "--allow-run", "debug_send": "--allow-run", "stop_job": "--allow-stop"}
#: Tools that only read.
READ_ONLY = (
    "plan_cell",
    "plan_script",
    "list_jobs",
    "job_status",
    "job_logs",
    "job_where",
    "job_diagnosis",
    "job_metrics",
    "checkpoints",
    "session_cells",
)

#: Errors whose message is the product's own sentence for the agent.
_CLEAR = (
    SpecError,
    CaptureError,
    BackendError,
    TokenError,
    SessionError,
    ValueError,
    TimeoutError,
    RuntimeError,
    OSError,
)


@dataclass(frozen=True)
class Permissions:
    """What a server may change: run jobs (and send debugger lines), stop jobs."""

    run: bool = False
    stop: bool = False

    def check(self, tool: str) -> None:
        """Refuse ``tool`` with the flag that allows it, when not allowed."""
        allowed = {"--allow-run": self.run, "--allow-stop": self.stop}[MUTATING[tool]]
        if not allowed:
            raise ToolError(
                f"{tool} is refused: this MCP server is read-only; start it with "
                f"{MUTATING[tool]} to allow it"
            )


def clear_errors(fn: F) -> F:
    """``fn`` with the product's errors turned into a :class:`ToolError` carrying their message."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except ToolError:
            raise
        except _CLEAR as exc:
            raise ToolError(bounded(str(exc) or type(exc).__name__, max_lines=40)) from None
        except Exception as exc:
            raise ToolError(f"{type(exc).__name__}: {bounded(str(exc), max_lines=20)}") from None

    return wrapper  # type: ignore[return-value]


def _options(text: str) -> argparse.Namespace:
    """The magic's options (``--nodes 1 --nproc 2 ...``) parsed; SpecError naming a bad one."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:  # never exit the server
            raise SpecError(f"options {text!r}: {message}")

    parser = _Parser(prog="options", add_help=False)
    add_job_options(parser)
    return parser.parse_args(shlex.split(text))


def _mine(service: JobService, name: str) -> Job:
    job = service.registered().get(name)
    if job is None:
        raise ToolError(
            f"no job named {name!r} was started or followed by this server; "
            "list_jobs shows the jobs it can see"
        )
    return job


def _grep(text: str, pattern: str) -> str:
    try:
        found = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"grep {pattern!r} is not a regular expression: {exc}") from None
    return "\n".join(line for line in text.splitlines() if found.search(line))


def metrics_summary(table: MetricsTable) -> str:
    """One line per reported metric: its count, its value at the highest step (the lowest
    rank's), min and max of its numbers, and how many were NaN."""
    lines = []
    for column in table.columns:
        if column in _ROW_KEYS:
            continue
        rows = [r for r in table if isinstance(r.get(column), int | float)]
        if not rows:
            continue
        newest = max(rows, key=lambda r: (r.get("step") or 0, -(r.get("rank") or 0)))
        numbers = [float(r[column]) for r in rows if not math.isnan(r[column])]
        line = (
            f"{column}: {len(rows)} values, at step {newest.get('step')} "
            f"{float(newest[column]):.6g} (rank {newest.get('rank')})"
        )
        if numbers:
            line += f", min {min(numbers):.6g}, max {max(numbers):.6g}"
        if len(numbers) < len(rows):
            line += f", {len(rows) - len(numbers)} NaN"
        lines.append(line)
    return "\n".join(lines) or "no metrics reported yet"


def _started_by(record: JobRecord) -> str:
    """Who started a listed job: jupyter-disttrain, or what its labels say (a foreign job)."""
    if not namespace.is_foreign(record):
        return "jupyter-disttrain"
    return record.facts.started_by or "someone else"


#: Columns of a metrics row that are not metrics.
_ROW_KEYS = ("rank", "step", "t")

Name = Annotated[str, Field(description="the job's name, as list_jobs shows it")]
Backend = Annotated[
    str | None, Field(description="where the job runs (local, kubernetes); omitted: found by name")
]
Options = Annotated[str, Field(description="the %%distrain options, e.g. '--nodes 1 --nproc 2'")]
Confirm = Annotated[bool, Field(description="must be true: the caller confirms the action")]


def build_server(
    service: JobService, permissions: Permissions = Permissions(), tokens: PlanTokens | None = None
) -> MCPServer:
    """An MCP server whose tools act through ``service`` within ``permissions``."""
    tokens = tokens or PlanTokens()
    mode = "read-only" if permissions == Permissions() else "widened"
    server = MCPServer(
        "jupyter-disttrain",
        instructions=(
            "Distributed training jobs. Preview with plan_cell/plan_script, then run_job "
            f"with the plan_token it returned. This server is {mode}."
        ),
    )
    tool = server.tool

    @tool()
    @clear_errors
    def plan_cell(
        source: Annotated[str, Field(description="the cell's Python code")], options: Options
    ) -> str:
        """Plan a cell as %%distrain would (nothing runs): the plan and its plan_token."""
        plan = service.plan(service.spec(_options(options)), source)
        return f"plan_token: {tokens.issue(plan)}\n{bounded(str(plan))}"

    @tool()
    @clear_errors
    def plan_script(
        path: Annotated[str, Field(description="the training script (.py)")],
        options: Options,
        args: list[str] | None = None,
    ) -> str:
        """Plan a training script as `disttrain run` would (nothing runs): the plan and token."""
        script = Script(path, tuple(args or ()), module=False, cwd=os.getcwd())
        spec = service.spec(_options(options), origin=script.target)
        plan = service.plan_script(spec, script)
        return f"plan_token: {tokens.issue(plan)}\n{bounded(str(plan))}"

    @tool()
    @clear_errors
    def run_job(
        plan_token: Annotated[
            str, Field(description="the token plan_cell or plan_script returned")
        ],
    ) -> str:
        """Run exactly the plan previewed under plan_token (once); answers the job's name."""
        permissions.check("run_job")
        job = service.run(tokens.redeem(plan_token))
        return f"started {job.name} on {job.backend.name}: follow it with job_status"

    @tool()
    @clear_errors
    def list_jobs(
        everyone: Annotated[
            bool, Field(description="every job of the namespace, whoever started it")
        ] = False,
    ) -> str:
        """List jobs: this server's backends' jobs, or every job of their namespace."""
        if everyone:
            listing = service.list_all(service.configured_backends())
        else:
            listing = service.list_jobs(diagnose=True)
        rows = [
            f"{r.backend}\t{r.name}\t{r.state}\t{r.nodes}x{r.nproc}\t{r.owner}\t{_started_by(r)}"
            + (f"\t{listing.diagnoses.get((r.backend, r.name)) or ''}")
            for r in listing.records
        ]
        errors = [f"{b}: {e}" for b, e in listing.errors.items()]
        header = "backend\tname\tstate\tsize\towner\tstarted_by\tdiagnosis"
        return bounded("\n".join([header, *rows, *errors]))

    @tool()
    @clear_errors
    def job_status(name: Name, backend: Backend = None) -> str:
        """A job's state, its failing ranks and the one sentence saying why."""
        job = service.registered().get(name)
        if job is not None:
            failing = sorted({int(e["rank"]) for e in job.errors() if e.get("rank") is not None})
            lines = [f"{name}: {job.status()}"]
            lines += [f"failing ranks: {', '.join(map(str, failing))}"] if failing else []
            lines += [f"cause: {job.diagnosis() or job.reason or 'none'}"]
            return "\n".join(lines)
        found, record = service.find_any(backend, name)
        cause = service.diagnosis(record, found) or record.reason or "none"
        return f"{name}: {record.state}\ncause: {cause}"

    @tool()
    @clear_errors
    def job_logs(
        name: Name,
        rank: int | None = None,
        tail: Annotated[int, Field(description="last lines per rank")] = 100,
        grep: Annotated[str | None, Field(description="keep lines matching this regex")] = None,
        backend: Backend = None,
    ) -> str:
        """What a job's ranks printed (one rank or all), its last lines, bounded."""
        _found, logs = service.bounded_logs(backend, name, rank, None if grep else tail)
        text = _grep(logs.text, grep) if grep else logs.text
        note = f"[{logs.message}]\n" if logs.message else ""
        return note + bounded(text)

    @tool()
    @clear_errors
    def job_where(name: Name, backend: Backend = None, timeout: float | None = None) -> str:
        """Where each rank of a running job is: its Python stack, and a sentence."""
        where = service.where(name, backend=backend, timeout=timeout)
        return bounded(f"{where.sentence()}\n{where.text()}")

    @tool()
    @clear_errors
    def job_diagnosis(name: Name, backend: Backend = None) -> str:
        """The diagnosis of a job (communication logs, errors, hangs) in sentences."""
        job = service.registered().get(name)
        if job is not None:
            return bounded(job.diagnosis() or "nothing to report")
        found, record = service.find_any(backend, name)
        return bounded(service.diagnosis(record, found) or "nothing to report")

    @tool()
    @clear_errors
    def job_metrics(name: Name) -> str:
        """A summary of the metrics this server's job reported: per name, how many values,
        the newest (its step and rank), min and max."""
        return bounded(metrics_summary(_mine(service, name).metrics()))

    @tool()
    @clear_errors
    def checkpoints(
        uri: Annotated[
            str, Field(description="a checkpoint folder: path or URL, or a job name of this server")
        ],
        verify: bool = False,
    ) -> str:
        """List the checkpoints under uri (and with verify, check every one's sha256)."""
        job = service.registered().get(uri)
        store = job.checkpoints() if job is not None else CheckpointStore(uri)
        if verify:
            store.verify()
        rows = [f"{c.step}\t{c.uri}\t{c.status} {c.reason}" for c in store.list()]
        return bounded("\n".join([f"{store.uri}: {len(rows)} checkpoint(s)", *rows]))

    @tool()
    @clear_errors
    def session_cells() -> str:
        """This server's warm sessions: backend, ranks, state, cells run, restarts, idle time."""
        return bounded(format_sessions(service.sessions.all()))

    @tool()
    @clear_errors
    def stop_job(name: Name, confirm: Confirm = False, backend: Backend = None) -> str:
        """Stop a job (every rank ends). Needs confirm=true, and for a job someone else
        started, Kubernetes RBAC that lets this user delete it."""
        permissions.check("stop_job")
        question = service.stop_question(name, backend)  # RBAC refuses here, confirmed or not
        if not confirm:
            raise ToolError(
                f"stopping {name} needs confirm=true" + (f" ({question})" if question else "")
            )
        return f"{name}: {service.stop(name, backend=backend)}"

    @tool()
    @clear_errors
    def debug_send(
        name: Name,
        rank: int,
        line: Annotated[str, Field(description="a pdb command for the paused rank")],
        confirm: Confirm = False,
    ) -> str:
        """Send one debugger line to a paused rank; answers what it printed. Needs confirm=true."""
        permissions.check("debug_send")
        if not confirm:
            raise ToolError(f"sending {line!r} to rank {rank} of {name} needs confirm=true")
        return bounded(_mine(service, name).debug(rank).send(line))

    return server
