"""The per-rank worker: load the payload, initialise the process group, run the cell.

Run as ``python -m jupyter_disttrain.runtime.worker PAYLOAD`` under torchrun
(or forked by the local backend's launcher, which calls :func:`main`), or,
for TensorFlow, once per task with ``TF_CONFIG`` set (see :mod:`.tf`).
Everything it tells the notebook goes through the line protocol on stdout.
Exit status: 0 when the cell ran, 1 when it raised, 2 when the payload
could not run here (version mismatch, unreadable payload).
"""

from __future__ import annotations

import ast
import base64
import datetime
import os
import platform
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import (
    collector,
    debugger,
    hangwatch,
    ifaces,
    integrations,
    lineends,
    metrics_server,
    pausing,
    preemption,
    rankprefix,
    relay,
    resources,
    stacks,
    tf,
    tqdm_hook,
    trainer_status,
)
from . import report as _report
from . import versions as package_versions
from .cell import main_module, run_payload, user_traceback
from .checkpoint import api as _checkpoint
from .exits import parser_error, without_parser_frames
from .jax import apply_env as apply_jax_env

RESULT_INLINE_LIMIT = 4 * 1024 * 1024
EXIT_OK, EXIT_USER_ERROR, EXIT_SETUP_ERROR = 0, 1, 2


class SetupError(RuntimeError):
    """The payload cannot run in this worker (the message says why and what to do)."""


def _reconfigure_std_streams(**options: Any) -> None:
    """``reconfigure(**options)`` ``sys.stdout`` and ``sys.stderr`` (each flushed first),
    where they can be (a replaced stream may not)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(**options)


def printable_output() -> None:
    """Make printing any text safe: what cannot be encoded (a lone surrogate) is written as
    its escape (``\\ud800``) instead of raising in the user's code."""
    _reconfigure_std_streams(errors="backslashreplace")


def redirect_output(log_dir: str | None, rank: int) -> None:
    """Send this process's fds 1 and 2 to ``log_dir/rank-R.log`` when a dir is given."""
    printable_output()
    if not log_dir:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    path = os.path.join(log_dir, f"rank-{rank}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the owner's only
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def own_protocol_stream() -> None:
    """Give protocol lines a stream of their own on fd 1 and keep the cell's partial line.

    ``print()`` writes its text and its newline apart: a protocol line another
    thread (a reporter, the relay) wrote between the two would land inside the
    printed line, and the reader, who keeps the signed control line, would lose
    the text. ``sys.stdout`` and ``sys.stderr`` become line-buffered streams that
    do not write through (a partial line stays in Python until its newline or an
    explicit flush), and protocol lines go out whole on fd 1 through a stream of
    their own, each on a line of its own: after a line the cell flushed unended (a
    progress bar), a newline first (:mod:`.lineends`). Call after
    :func:`redirect_output`: a log file's lines, too, go out one by one.
    """
    _reconfigure_std_streams(line_buffering=True, write_through=False)  # kept references
    sys.stdout.flush()
    sys.stderr.flush()
    out = lineends.LineEnd()
    err = out if lineends.same_file(1, 2) else lineends.LineEnd()
    sys.stdout = lineends.tracked_stream(1, out, sys.stdout)
    sys.stderr = lineends.tracked_stream(2, err, sys.stderr)
    _report.write_protocol_to(lineends.ProtocolWriter(1, out))


def load_payload(path: str) -> dict[str, Any]:
    """Read the payload envelope; raise :class:`SetupError` if it cannot be used here."""
    import pickle

    try:
        with open(path, "rb") as fh:
            envelope = pickle.load(fh)
    except Exception as exc:
        raise SetupError(f"cannot read the job payload {path}: {exc!r}") from exc
    if not isinstance(envelope, dict) or "source" not in envelope:
        raise SetupError(f"{path} is not a jupyter_disttrain payload")
    return envelope


def check_versions(payload: dict[str, Any]) -> None:
    """Fail fast when by-value code from the notebook cannot load in this Python."""
    want = str(payload.get("python", ""))
    here = platform.python_version()
    if want and want.split(".")[:2] != here.split(".")[:2]:
        hint = payload.get("image_hint") or "an image with the notebook's Python version"
        raise SetupError(
            f"the notebook runs Python {want} but this worker runs Python {here}; code shipped "
            f"by value needs the same minor version. Use {hint}, or pass --image with "
            f"Python {'.'.join(want.split('.')[:2])}"
        )


def check_packages(payload: dict[str, Any]) -> list[str]:
    """Compare the cell's third-party packages with this worker's, before the cell runs.

    A missing package fails the rank with the ``--pip`` fix; a different
    version is returned as a warning (the caller prints it).
    """
    import importlib.metadata
    import importlib.util

    missing: list[str] = []
    warnings: list[str] = []
    for name, (dist, want) in sorted((payload.get("packages") or {}).items()):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(f"{dist}=={want}")
            continue
        try:
            here = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if here != want:
            warnings.append(f"{dist} {here} here, {want} in the notebook")
    if missing:
        pips = " ".join(f"--pip {m}" for m in missing)
        raise SetupError(
            f"the {'script' if payload.get('script') else 'cell'} uses packages this worker "
            f"does not have: {', '.join(missing)}; add "
            f"{pips} (or install them in the image)"
        )
    return warnings


def requested_backend(source: str) -> str | None:
    """The backend a pasted ``init_process_group("gloo")`` call asks for, if any."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "init_process_group":
            continue
        args = [kw.value for kw in node.keywords if kw.arg == "backend"] + list(node.args[:1])
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value.split(":")[0].strip().lower()
    return None


def choose_backend(wanted: str, source: str, cuda: bool) -> tuple[str, str | None]:
    """Pick gloo or nccl; return ``(backend, warning or None)``."""
    if wanted == "auto":
        wanted = requested_backend(source) or ("nccl" if cuda else "gloo")
    if wanted == "nccl" and not cuda:
        return "gloo", (
            "jupyter_disttrain: nccl was requested but CUDA is not available here; "
            "using gloo instead (pass --dist-backend gloo to silence this warning)"
        )
    if wanted not in ("gloo", "nccl"):
        return "gloo", f"jupyter_disttrain: unknown backend {wanted!r}; using gloo"
    return wanted, None


def init_torch_distributed(payload: dict[str, Any], rank: int) -> str:
    """Initialise the default process group and make user re-initialisation harmless."""
    import torch
    import torch.distributed as dist

    backend, warning = choose_backend(
        str(payload.get("dist_backend", "auto")), payload["source"], torch.cuda.is_available()
    )
    if warning and rank == 0:
        print(warning, file=sys.stderr, flush=True)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:  # gloo's own words for a missing interface name neither it nor what the host has
        ifaces.check_gloo_ifname(os.environ, ifaces.interfaces())
    timeout = datetime.timedelta(seconds=float(os.environ.get("DISTRAIN_PG_TIMEOUT", "1800")))
    if not dist.is_initialized():
        stacks.enable_flight_recorder()  # where() names the first collective a rank missed
        dist.init_process_group(backend=backend, timeout=timeout)
        # Every rank's side of the group is up before any cell runs: otherwise a rank whose
        # cell needs no collective can finish and tear its connections down while a slower
        # peer is still connecting to it (gloo: "connectFullMesh failed ... closed by peer").
        dist.barrier()
        stacks.mark_cell_start()  # collectives are numbered from the cell's first
    _make_reinit_harmless(dist)
    return backend


def _make_reinit_harmless(dist: Any) -> None:
    """Pasted tutorial code calls init/destroy itself; on a live group both do nothing."""
    from torch.distributed import distributed_c10d as c10d

    real_init: Callable[..., Any] = c10d.init_process_group
    real_destroy: Callable[..., Any] = c10d.destroy_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if dist.is_initialized():
            return None
        return real_init(*args, **kwargs)  # type: ignore[no-any-return]

    def destroy_process_group(group: Any = None) -> None:
        if group is None:  # the job's default group lives until the runtime ends
            return None
        return real_destroy(group)  # type: ignore[no-any-return]

    for mod in (dist, c10d):
        setattr(mod, "init_process_group", init_process_group)  # noqa: B010
        setattr(mod, "destroy_process_group", destroy_process_group)  # noqa: B010
    dist._distrain_real_destroy = real_destroy


#: The framework set-up of a payload that names none: PyTorch's.
DEFAULT_RUNTIME = "jupyter_disttrain.runtime.worker:init_torch"


def init_torch(payload: dict[str, Any], rank: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """PyTorch's set-up: the default process group (see :func:`init_torch_distributed`)."""
    return init_torch_distributed(payload, rank), {}, {}


def init_framework(
    payload: dict[str, Any], rank: int
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Set up the payload's framework: ``(backend, names for the cell, extra hello fields)``.

    The payload names the set-up as ``"module:function"`` (its framework's
    ``runtime``); the function is called with ``(payload, rank)``.
    """
    import importlib

    entry = str(payload.get("runtime") or DEFAULT_RUNTIME)
    module, sep, attribute = entry.partition(":")
    if not sep or not module or not attribute:
        raise SetupError(f"the payload's framework set-up {entry!r} is not 'module:function'")
    try:
        setup: Callable[..., tuple[str, dict[str, Any], dict[str, Any]]] = getattr(
            importlib.import_module(module), attribute
        )
    except (ImportError, AttributeError, ValueError) as exc:
        raise SetupError(
            f"the framework set-up {entry!r} the payload names cannot be loaded in this worker: "
            f"{exc}; install the framework's package in the image"
        ) from exc
    return setup(payload, rank)


def framework_result(payload: dict[str, Any], value: Any) -> Any:
    """Rank 0's value as its framework's ``result(value)`` makes it (JAX arrays to numpy);
    unchanged when the framework's runtime module has no ``result``."""
    module = sys.modules.get(str(payload.get("runtime") or DEFAULT_RUNTIME).partition(":")[0])
    convert = getattr(module, "result", None)  # the set-up imported its module
    return convert(value) if callable(convert) else value


def finish_torch_distributed() -> None:
    """Tear down the default process group if the cell left it up."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_initialized():
        return
    destroy = getattr(dist, "_distrain_real_destroy", dist.destroy_process_group)
    try:
        destroy()
    except Exception:  # teardown after a peer died must not mask the result
        pass


def install_modules(files: dict[str, bytes]) -> None:
    """Put the user's own modules that came with the cell first on ``sys.path``."""
    if not files:
        return
    import importlib
    import tempfile

    root = tempfile.mkdtemp(prefix="distrain-modules-")  # the owner's only
    for relative, data in files.items():
        target = os.path.realpath(os.path.join(root, relative))
        if not target.startswith(root + os.sep):
            raise SetupError(f"the payload names a module file outside its folder: {relative!r}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)
    sys.path.insert(0, root)
    importlib.invalidate_caches()
    import atexit
    import shutil

    atexit.register(shutil.rmtree, root, True)


def build_namespace(payload: dict[str, Any]) -> dict[str, Any]:
    """The cell's globals: captured notebook values, its imports, ``report`` and checkpoints."""
    import importlib

    install_modules(payload.get("modules") or {})
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "report": _report.report,
        "save_checkpoint": _checkpoint.save_checkpoint,
        "load_checkpoint": _checkpoint.load_checkpoint,
        "every": _checkpoint.every,
    }
    for alias, module in payload.get("imports", {}).items():
        try:
            namespace[alias] = importlib.import_module(module)
        except ImportError as exc:
            raise SetupError(
                f"the cell uses module {module!r} (as {alias!r}), which is not installed in "
                f"this worker: {exc}; install it in the image (or --pip {module.split('.')[0]})"
            ) from exc
    if payload.get("globals"):
        try:
            import cloudpickle
        except ImportError:
            raise SetupError(
                "cloudpickle is not installed in this worker; add it to the image"
            ) from None
        for name, blob in payload["globals"].items():
            try:
                namespace[name] = cloudpickle.loads(blob)
            except Exception as exc:
                raise SetupError(
                    f"notebook variable {name!r} could not be loaded on this worker: {exc!r}"
                ) from exc
    return namespace


def encode_exception(exc: BaseException) -> dict[str, Any]:
    """The ``error`` line's fields for ``exc`` (type, message, traceback, type pickle)."""
    etype = type(exc)
    said = parser_error(exc)  # argparse's error line, not its exit status
    tb = user_traceback(exc.__traceback__)
    tb = tb if said is None else without_parser_frames(tb)
    fields: dict[str, Any] = {
        "type": etype.__name__,
        "module": etype.__module__,
        "message": str(exc) if said is None else said,
        "traceback": "".join(
            traceback.format_exception(
                etype, exc, tb if said is None else without_parser_frames(tb)
            )
        ),
    }
    if etype.__module__ == "__main__":
        try:
            import cloudpickle

            fields["type_pickle"] = base64.b64encode(cloudpickle.dumps(etype)).decode()
        except Exception:
            pass
    return fields


def encode_result(value: Any, result_dir: str | None) -> dict[str, Any]:
    """The ``result`` line's fields: inline base64, or a file in ``result_dir`` if large."""
    import cloudpickle

    data = cloudpickle.dumps(value)
    if len(data) > RESULT_INLINE_LIMIT and result_dir:
        path = os.path.join(result_dir, "result.pkl")
        tmp = path + ".tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return {"encoding": "cloudpickle", "uri": path, "bytes": len(data)}
    return {"encoding": "cloudpickle+base64", "data": base64.b64encode(data).decode()}


def versions() -> dict[str, str]:
    """Versions this worker runs with, reported in ``hello``."""
    return package_versions.reported()


def warn_packages(payload: dict[str, Any]) -> None:
    """:func:`check_packages`, its version warnings printed to stderr (shown above the job)."""
    for warning in check_packages(payload):
        print(f"distrain: warning: package versions differ: {warning}", file=sys.stderr, flush=True)


def uses_checkpoints(payload: dict[str, Any]) -> bool:
    """Whether the cell saves checkpoints: itself, or through a trainer autolog follows."""
    source = str(payload["source"])
    if preemption.uses_checkpoints(source):
        return True
    blobs = list((payload.get("globals") or {}).values())
    folder = os.environ.get(_checkpoint.ENV_DIR, "").strip()
    return bool(folder) and integrations.mentioned(("hf", "lightning"), source, blobs)


def run(payload_path: str) -> int:
    """Run one payload in this process; return the exit status."""
    rank = int(os.environ.get("RANK", "0"))
    redirect_output(os.environ.get("DISTRAIN_LOG_DIR"), rank)
    own_protocol_stream()
    started = time.time()
    try:
        with collector.paused():  # the framework's import, in a worker not forked warm
            payload = load_payload(payload_path)
            check_versions(payload)
            package_versions.use(payload)
            warn_packages(payload)
            backend, names, hello = init_framework(payload, rank)
    except BaseException as exc:
        _report.emit("error", **encode_exception(exc))
        return EXIT_SETUP_ERROR
    _report.emit(
        "hello",
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        node_rank=int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0"))),
        host=socket.gethostname(),
        pid=os.getpid(),
        launched_pid=int(os.environ.get("DISTRAIN_STANDIN_PID", os.getpid())),
        backend=backend,
        restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        versions=versions(),
        **hello,
    )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    hangwatch.start(rank, world)
    resources.start(rank, int(os.environ.get("LOCAL_RANK", "0")), world)
    metrics_server.start(rank)
    trainer_status.start(rank)  # Kubeflow Trainer's own progress, when its endpoint is here
    relay.start(
        rank,
        world,
        int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0"))),
    )
    debugger.install()  # breakpoint() and pdb.set_trace() are driven from the notebook
    pausing.install()  # the notebook may pause a running rank at its next cell line
    integrations.install()  # autolog: Lightning, HF Trainer, Keras, Accelerate report themselves
    if uses_checkpoints(payload):
        preemption.install()  # SIGTERM: one last checkpoint, then an exit for a restart
    failed = False
    try:
        if payload.get("session"):  # a warm group: cells arrive over rank 0's connection
            from .session import serve

            serve(payload, names, sys.modules[__name__])
        else:
            module = main_module({**build_namespace(payload), **names})
            blobs = list((payload.get("globals") or {}).values())
            if rank == 0 and tqdm_hook.uses_tqdm(payload["source"], blobs):
                tqdm_hook.install()  # the cell's bar drives the job's progress
            value = run_payload(payload, module.__dict__)  # a cell, or a script
            _checkpoint.wait_for_saves()  # a background save fails the cell if it fails
            if rank == 0:
                value = framework_result(payload, value)
                result = encode_result(value, os.environ.get("DISTRAIN_JOB_DIR"))
                _report.emit("result", **result)
    except BaseException as exc:
        if debugger.post_mortem_on() and isinstance(exc, Exception):
            debugger.post_mortem(exc)  # paused in the raising frame until the notebook says c
        _report.emit("error", **encode_exception(exc))
        sys.stdout.flush()
        failed = True
        return EXIT_USER_ERROR
    finally:
        _checkpoint.wait_for_saves(raise_errors=False)
        _report.flush_progress()
        trainer_status.stop()
        resources.stop()
        relay.stop(wait=not failed)  # a failed rank 0 does not wait for the others' last lines
        metrics_server.stop()
        hangwatch.stop()
        finish_torch_distributed()
    _report.emit("done", seconds=round(time.time() - started, 3))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``worker PAYLOAD``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jupyter_disttrain.runtime.worker PAYLOAD", file=sys.stderr)
        return EXIT_SETUP_ERROR
    tf.apply_env(os.environ)  # a TensorFlow task's rank comes from TF_CONFIG
    apply_jax_env(os.environ)  # a JAX process's rank from JAX_PROCESS_ID (one per pod)
    prefixed = os.environ.get("DISTRAIN_RANK_PREFIX") == "1"
    if prefixed:
        rankprefix.start(int(os.environ.get("RANK", "0")))
    try:
        return run(args[0])
    finally:
        if prefixed:
            rankprefix.finish()


def exit_process(code: int) -> None:
    """End this worker with ``code`` without the interpreter's teardown.

    By now the result and ``done`` lines are written and the process group is
    destroyed. Python's finalisation and C++ static destructors can still
    abort the process (``terminate called without an active exception``:
    a framework thread object destroyed while joinable), which would turn a
    finished rank into a failed one and make torchrun or the operator run
    the training again. So: run the ``atexit`` handlers (user code may
    rely on them), flush, and leave with ``os._exit`` as a forked worker does.
    """
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


if __name__ == "__main__":
    from .forkclient import die_with_parent

    die_with_parent()
    try:
        status = main()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else EXIT_SETUP_ERROR
    except BaseException:
        traceback.print_exc()
        status = EXIT_SETUP_ERROR
    exit_process(status)
