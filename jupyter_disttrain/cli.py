"""The ``disttrain`` command: the same jobs for training code kept in files.

``disttrain run --nodes N --nproc M SCRIPT.py ARGS`` (as ``torchrun --nnodes N
--nproc-per-node M SCRIPT.py ARGS``: options first, then the script and its
arguments; ``-m MODULE ARGS`` for ``python -m``), ``disttrain jobs``,
``disttrain logs NAME``, ``disttrain where NAME``, ``disttrain stop NAME``,
``disttrain nccl LOGFILE``,
``disttrain checkpoints URI``, ``disttrain mcp [--allow-run] [--allow-stop]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .backends.base import BackendError
from .backends.local import lingering
from .options import add_job_options, count, seconds
from .payload import CaptureError, Script
from .results import JobFailed, JobStopped
from .service import JobService, export_backends
from .spec import SpecError
from .textview import LiveView, format_job_table, format_namespace_table, format_runtime_table


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``disttrain``."""
    parser = argparse.ArgumentParser(
        prog="disttrain", description="Run and manage distributed training jobs."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run a training script as a distributed job",
        usage="disttrain run [OPTIONS] SCRIPT.py [ARGS ...] | [OPTIONS] -m MODULE [ARGS ...]",
        description="Run SCRIPT.py ARGS on every rank, as torchrun does: options first, then "
        "the script and its arguments (everything after the script is the script's).",
    )
    add_job_options(run)
    run.add_argument(
        "--launch",
        choices=("fork", "exec"),
        default="fork",
        help="local backend: fork from a warm launcher or start fresh interpreters",
    )
    add_script_arguments(run)
    render = sub.add_parser(
        "render",
        help="print the Kubernetes YAML for a training script",
        usage="disttrain render [OPTIONS] SCRIPT.py [ARGS ...] | [OPTIONS] -m MODULE [ARGS ...]",
    )
    add_job_options(render)
    add_script_arguments(render)
    jobs = sub.add_parser("jobs", help="list jobs (running ones with their diagnosis)")
    jobs.add_argument(
        "--all", action="store_true", help="every job of the namespace, whoever started it"
    )
    sub.add_parser("runtimes", help="list the training runtimes of the configured clusters")
    logs = sub.add_parser("logs", help="print a job's logs")
    logs.add_argument("name")
    logs.add_argument("--rank", type=count, default=None)
    logs.add_argument("--tail", type=count, default=None)
    logs.add_argument("--backend", default=None, help="where the job runs")
    where = sub.add_parser("where", help="print where a job's ranks are (their stacks)")
    where.add_argument("name")
    where.add_argument("--timeout", type=seconds, default=None)
    where.add_argument("--backend", default=None, help="where the job runs")
    stop = sub.add_parser("stop", help="stop a job")
    stop.add_argument("name")
    stop.add_argument("--backend", default=None, help="where the job runs")
    stop.add_argument(
        "--yes", action="store_true", help="confirm stopping a job another tool or user started"
    )
    nccl = sub.add_parser("nccl", help="summarise NCCL / communication lines of a log file")
    nccl.add_argument("logfile")
    nccl.add_argument("--json", action="store_true", help="print the summary as JSON")
    ckpt = sub.add_parser("checkpoints", help="list the checkpoints of a directory or URL")
    ckpt.add_argument("uri", help="checkpoint directory: a path or fsspec URL (s3://...)")
    ckpt.add_argument("--verify", action="store_true", help="check every checkpoint's sha256")
    ckpt.add_argument("--json", action="store_true", help="print the records as JSON")
    launchers = sub.add_parser(
        "launchers", help="list this user's lingering local launchers (warm, awaiting a job)"
    )
    launchers.add_argument("--stop", action="store_true", help="end them (and their jobs)")
    serve = sub.add_parser(
        "mcp", help="serve the jobs to an agent over MCP (stdio); read-only unless widened"
    )
    serve.add_argument(
        "--allow-run",
        action="store_true",
        help="allow run_job (a previewed plan's token) and debug_send",
    )
    serve.add_argument("--allow-stop", action="store_true", help="allow stop_job")
    return parser


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the job service's MCP tools over stdin/stdout until the client leaves."""
    from .mcp import Permissions, build_server

    server = build_server(JobService(), Permissions(run=args.allow_run, stop=args.allow_stop))
    server.run("stdio")
    return 0


def add_script_arguments(parser: argparse.ArgumentParser) -> None:
    """``[-m] SCRIPT [ARGS ...]``, torchrun's way: every argument after the script is its own."""
    parser.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="SCRIPT is a module name, run as python -m MODULE (found from the current folder)",
    )
    parser.add_argument(
        "script", metavar="SCRIPT", help="the Python file (with -m: module) to run on every rank"
    )
    rest = parser.add_argument(
        "script_args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the script's own arguments (its sys.argv[1:])",
    )
    rest.required = False  # none is fine; a missing SCRIPT is the error to name


#: Options that, written after the script, most likely meant ``disttrain``'s own.
_OURS_AFTER_SCRIPT = ("--nodes", "--nproc", "--backend", "--framework", "--dry-run", "--export")


def script_of(args: argparse.Namespace) -> Script:
    """The script and its arguments, as given; notes options that now go to the script."""
    script_args = tuple(args.script_args)
    ours = [a for a in script_args if a.split("=")[0] in _OURS_AFTER_SCRIPT]
    if ours:
        print(
            f"disttrain: note: {' '.join(ours)} after {args.script} go to the script, as "
            f"with torchrun; disttrain's options go before it: disttrain {args.command} "
            f"{' '.join(ours)} ... {args.script} ...",
            file=sys.stderr,
        )
    return Script(args.script, script_args, module=args.module, cwd=os.getcwd())


def cmd_run(args: argparse.Namespace) -> int:
    """Run a script; exit 0 when the job succeeded."""
    service = JobService(launch_mode=args.launch)
    script = script_of(args)
    try:
        spec = service.spec(args, origin=script.target)
        plan = service.plan_script(spec, script)
        outcome = service.run_and_follow(
            plan, LiveView("lines"), export=args.export, dry_run=args.dry_run
        )
    except (SpecError, CaptureError, BackendError) as exc:
        print(f"disttrain: {exc}", file=sys.stderr)
        return 2
    if outcome.what == "exported":
        print(f"wrote {args.export} (submit with: {outcome.hint})")
        return 0
    if outcome.what == "planned":
        if plan.export() is not None:  # manifests: what travels, as a YAML comment
            print(f"# {plan.payload.describe()}")
        print(plan)
        return 0
    job = outcome.job
    assert job is not None
    if outcome.what == "interrupted":
        print(f"{job.name}: stopped (interrupted)", file=sys.stderr)
        return 130
    try:
        value = job.result()
    except (JobFailed, JobStopped) as exc:
        print(f"{job.name}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"{job.name} failed:\n{exc}", file=sys.stderr)
        return 1
    if value is not None:
        print(f"result: {value!r}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    """Print (or with --export, write) the manifests a script would be submitted as."""
    makers = export_backends()
    if args.backend is None:
        args.backend = makers[0]
    elif args.backend not in makers:
        print(
            f"disttrain render: only --backend {' or '.join(makers)} has manifests to render",
            file=sys.stderr,
        )
        return 2
    service = JobService()
    script = script_of(args)
    try:
        plan = service.plan_script(service.spec(args, origin=script.target), script)
        if args.export:
            service.export(plan, args.export)
    except (SpecError, CaptureError, BackendError) as exc:
        print(f"disttrain: {exc}", file=sys.stderr)
        return 2
    if args.export:
        print(f"wrote {args.export}")
    else:
        print(plan, end="")
    return 0


def cmd_nccl(args: argparse.Namespace) -> int:
    """Summarise a log file's communication lines."""
    from .nccl import format_summary, summarize, summary_to_json

    try:
        with open(args.logfile, errors="replace") as fh:
            summary = summarize(fh)
    except OSError as exc:
        print(f"disttrain: cannot read {args.logfile}: {exc.strerror}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary_to_json(summary), indent=2))
    else:
        print(format_summary(summary))
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    """List a checkpoint directory; exit 1 when a checkpoint is damaged."""
    from dataclasses import asdict

    from .checkpoints.store import CheckpointError, CheckpointStore, format_table

    try:
        store = CheckpointStore(args.uri)
        if args.verify:
            store.verify()
        infos = store.list()
    except CheckpointError as exc:
        print(f"disttrain: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the storage's own errors (credentials, network)
        print(f"disttrain: cannot read {args.uri}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        # each row's "kind" repeats "layout", its former name, for scripts that read it
        rows = [
            {**{k: v for k, v in asdict(c).items() if k != "record"}, "kind": c.layout}
            for c in infos
        ]
        print(json.dumps(rows, indent=1))
    else:
        print(f"{store.uri}: {len(infos)} checkpoint(s)")
        print(format_table(infos))
    return 0 if all(c.ok for c in infos) else 1


def cmd_launchers(stop: bool) -> int:
    """Print this user's lingering launchers (pid, linger, socket); end them with ``stop``."""
    if stop:
        for pid in lingering.stop_lingering():
            print(f"stopped the lingering launcher {pid}")
        return 0
    for found in lingering.lingering():
        print(f"{found['pid']}  lingers {found.get('linger')} s idle  {found['socket']}")
    return 0


def cmd_jobs(service: JobService) -> int:
    """Every job of the backends that need no set-up, with running jobs' diagnoses."""
    listing = service.list_jobs(diagnose=True)
    print(format_job_table(listing.records, set(), listing.diagnoses))
    for backend, error in listing.errors.items():
        print(f"disttrain: {backend}: {error}", file=sys.stderr)
    return 0


def cmd_jobs_all(service: JobService) -> int:
    """Every job of the configured backends' scopes, whoever started it."""
    listing = service.list_all(service.configured_backends())
    print(format_namespace_table(listing.records))
    for backend, error in listing.errors.items():
        print(f"disttrain: {backend}: {error}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``disttrain``."""
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "nccl":
        return cmd_nccl(args)
    if args.command == "render":
        return cmd_render(args)
    if args.command == "checkpoints":
        return cmd_checkpoints(args)
    if args.command == "mcp":
        return cmd_mcp(args)
    if args.command == "launchers":
        return cmd_launchers(args.stop)
    service = JobService()
    try:
        if args.command == "jobs" and args.all:
            return cmd_jobs_all(service)
        if args.command == "jobs":
            return cmd_jobs(service)
        if args.command == "runtimes":
            print(format_runtime_table(service.runtimes()))
        elif args.command == "logs":
            print(service.logs(args.name, rank=args.rank, tail=args.tail, backend=args.backend))
        elif args.command == "where":
            print(service.where(args.name, backend=args.backend, timeout=args.timeout).text())
        elif args.command == "stop":
            question = None if args.yes else service.stop_question(args.name, args.backend)
            if question is not None:
                print(f"disttrain: {question} (disttrain stop {args.name} --yes)", file=sys.stderr)
                return 1
            print(f"{args.name}: {service.stop(args.name, backend=args.backend)}")
    except BackendError as exc:
        print(f"disttrain: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
