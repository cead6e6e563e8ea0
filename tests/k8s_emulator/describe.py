"""What an emulator is doing right now, as text for a failing test's message.

:func:`describe` reports, at the moment it is called: the Kubeflow jobs (and
JobSets, batch Jobs) with their conditions, every pod with its phase and its
containers' states, the kubelet's pod workers and container runners (thread
alive, process id and state, the last log lines), the last Events, the
controllers' queues and threads, and where each emulator thread is waiting.
Every failing test that started an emulator prints it (its report's
"emulator state" section, :mod:`.fixtures`), a timed-out wait included, so a
Kubernetes test that fails explains itself.

Reading never blocks on the emulator's threads: objects are copies from the
store, the rest is read without taking their locks.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

from . import procs
from .container import ContainerRunner
from .kubelet import PodWorker
from .meta import Obj
from .resources import EVENTS, PODS

if TYPE_CHECKING:
    from .emulator import Emulator

#: Threads whose stacks are shown (prefixes of the emulator's thread names).
_THREADS = (
    "container-",
    "training-operator",
    "controller",
    "job-controller",
    "jobset-controller",
    "trainjob-controller",
    "kueue",
)


def describe(emulator: Emulator, *, events: int = 20, log_lines: int = 3) -> str:
    """The emulator's state: jobs, pods, kubelet workers, Events, controller queues, threads."""
    out = [f"--- emulator {emulator.id} on {emulator.url} (closing={emulator.closing}) ---"]
    sections: list[tuple[str, Callable[[], list[str]]]] = [
        ("jobs", lambda: _jobs(emulator)),
        ("pods", lambda: _pods(emulator)),
        ("kubelet", lambda: _kubelet(emulator, log_lines)),
        ("events", lambda: _events(emulator, events)),
        ("controllers", lambda: _controllers(emulator)),
        ("threads", _threads),
    ]
    if not emulator.store.lock.acquire(timeout=5):  # a stuck holder: show where threads wait
        out.append("store lock held for 5 s: jobs, pods, Events not readable")
        sections = [entry for entry in sections if entry[0] in ("kubelet", "threads")]
    else:
        emulator.store.lock.release()
    for name, section in sections:
        try:
            out += section()
        except Exception as exc:  # a report must not hide the failure it explains
            out.append(f"{name}: not readable: {exc!r}")
    return "\n".join(out)


def _conditions(obj: Obj) -> str:
    status = obj.get("status") or {}
    conds = [
        f"{c.get('type')}={c.get('status')}" + (f"({c['reason']})" if c.get("reason") else "")
        for c in status.get("conditions") or []
    ]
    return " ".join(conds) or "no conditions"


def _jobs(emulator: Emulator) -> list[str]:
    out = ["jobs:"]
    for resource in emulator.registry.served():
        if resource.kind not in ("PyTorchJob", "TFJob", "TrainJob", "JobSet", "Job"):
            continue
        for obj in emulator.store.objects(resource.key)[0]:
            meta, status = obj["metadata"], obj.get("status") or {}
            deleting = " deleting" if meta.get("deletionTimestamp") else ""
            counts = status.get("replicaStatuses") or status.get("replicatedJobsStatus") or ""
            if isinstance(counts, dict):
                counts = {
                    k: {n: v for n, v in c.items() if n != "selector"} for k, c in counts.items()
                }
            out.append(
                f"  {resource.kind} {meta['namespace']}/{meta['name']}{deleting}: "
                f"{_conditions(obj)} {counts or ''}".rstrip()
            )
    return out if len(out) > 1 else ["jobs: none"]


def _state(status: Obj) -> str:
    state = status.get("state") or {}
    kind = next(iter(state), "?")
    detail = state.get(kind) or {}
    text = kind
    if kind == "waiting":
        text += f"({detail.get('reason', '')})"
    elif kind == "terminated":
        text += f"(exit {detail.get('exitCode')}, {detail.get('reason', '')})"
    if status.get("restartCount"):
        text += f" restarts={status['restartCount']}"
    return f"{status.get('name')}={text}"


def _pods(emulator: Emulator) -> list[str]:
    out = ["pods:"]
    for pod in emulator.store.objects(PODS.key)[0]:
        meta, status = pod["metadata"], pod.get("status") or {}
        deleting = " deleting" if meta.get("deletionTimestamp") else ""
        node = pod["spec"].get("nodeName") or "unscheduled"
        inits = " ".join(_state(s) for s in status.get("initContainerStatuses") or [])
        mains = " ".join(_state(s) for s in status.get("containerStatuses") or [])
        line = f"  {meta['namespace']}/{meta['name']} {status.get('phase', 'no phase')}{deleting}"
        line += f" on {node}: " + (f"init[{inits}] " if inits else "") + (mains or "no statuses")
        out.append(line)
    return out if len(out) > 1 else ["pods: none"]


def _kubelet(emulator: Emulator, log_lines: int) -> list[str]:
    kubelet = emulator.kubelet
    if kubelet is None:
        return ["kubelet: not started"]
    workers: list[PodWorker] = list(kubelet._workers.values())
    out = [f"kubelet: {len(workers)} pod workers"]
    for worker in workers:
        flags = [
            "alive" if worker.is_alive() else "ENDED",
            "stopping" if worker.stopping.is_set() else "",
            "sandbox ready" if worker.sandbox_ready else "no sandbox",
            f"unschedulable: {worker.scheduled}" if worker.scheduled else "",
        ]
        out.append(f"  worker {worker.name}: " + ", ".join(f for f in flags if f))
        for runner in [*worker.inits.values(), *worker.containers.values()]:
            out += _runner(runner, log_lines)
    return out


def _runner(runner: ContainerRunner, log_lines: int) -> list[str]:
    thread = runner._thread
    started = thread.ident is not None
    alive = "alive" if thread.is_alive() else ("ended" if started else "not started")
    proc = runner._proc
    where = "no process"
    if proc is not None:
        try:
            ps = psutil.Process(proc.pid)
            cpu = ps.cpu_times()
            where = (
                f"pid {proc.pid} {ps.status()}, cpu {cpu.user + cpu.system:.1f} s, "
                f"up {time.time() - ps.create_time():.0f} s"
            )
        except psutil.Error:
            where = f"pid {proc.pid} gone"
    kind = "init " if runner.init else ""
    out = [
        f"    {kind}container {runner.name}: {runner.state} thread {alive}, {where}, "
        f"runs={len(runner.logs)}",
        *_live_processes(f"{runner.worker.marker}{runner.name}/"),
    ]
    if runner.logs:
        lines, _ = runner.logs[-1].read(0)
        for _, line in lines[-log_lines:]:
            out.append(f"      | {line.decode('utf-8', 'replace').rstrip()[:200]}")
    return out


def _live_processes(prefix: str) -> list[str]:
    """The container's live processes by run (a process of an ended run is a survivor)."""
    by_run: dict[str, list[str]] = {}
    for proc in procs.members(prefix):
        try:
            run = proc.environ().get(procs.MARKER, "")[len(prefix) :].strip("/")
            what = f"{proc.pid} {proc.status()} {' '.join(proc.cmdline()[:3])[:80]}"
        except psutil.Error:
            continue
        by_run.setdefault(run, []).append(what)
    runs = sorted(by_run.items())
    return [f"      run {run} live: " + "; ".join(sorted(found)) for run, found in runs]


def _events(emulator: Emulator, count: int) -> list[str]:
    items = emulator.store.objects(EVENTS.key)[0]
    items.sort(key=lambda e: int(e["metadata"].get("resourceVersion", 0)))
    out = [f"last {min(count, len(items))} of {len(items)} events:"]
    for event in items[-count:]:
        involved = event.get("involvedObject") or {}
        repeat = f" (x{event['count']})" if int(event.get("count") or 1) > 1 else ""
        out.append(
            f"  {event.get('lastTimestamp') or ''} {event.get('type')} "
            f"{event.get('reason')} {involved.get('kind')}/{involved.get('name')}: "
            f"{str(event.get('message', ''))[:200]}{repeat}"
        )
    return out


def _controllers(emulator: Emulator) -> list[str]:
    out = ["controllers:"]
    for error in emulator.store.listener_errors:
        out.append(f"  store listener failed: {error}")
    operator = emulator.operator
    if operator is not None:
        alive = "alive" if operator._thread.is_alive() else "ENDED"
        pending = sorted(f"{fw.kind} {ns}/{name}" for fw, ns, name in set(operator._pending))
        failing = {f"{fw.kind} {ns}/{name}": n for (fw, ns, name), n in operator.failures.items()}
        out.append(
            f"  training-operator: thread {alive}, queue {operator._queue.qsize()}, "
            f"pending {pending}, failing {failing}"
        )
    loops: list[Any] = list(emulator.controllers)
    kueue = emulator.kueue._controller
    if kueue is not None:
        loops.append(kueue)
    for loop in loops:
        alive = "alive" if loop._thread.is_alive() else "ENDED"
        delayed = sorted((round(at - time.monotonic(), 2), key) for key, at in loop._due.items())
        out.append(
            f"  {loop.name}: thread {alive}, ready {list(loop._ready)}, "
            f"delayed {delayed}, failing {dict(loop._failures)}"
        )
    return out


def _threads() -> list[str]:
    frames = sys._current_frames()
    out = ["emulator threads (innermost frames):"]
    for thread in threading.enumerate():
        named = thread.name.startswith(_THREADS) or isinstance(thread, PodWorker)
        if not named or thread.ident not in frames:
            continue
        stack = traceback.extract_stack(frames[thread.ident])[-3:]
        where = " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(stack))
        kind = "pod worker " if isinstance(thread, PodWorker) else ""
        out.append(f"  {kind}{thread.name}: {where}")
    return out


#: Emulators started lately in this process (the test that fails reports theirs).
_started: deque[Emulator] = deque(maxlen=8)


def track(emulator: Emulator) -> None:
    """Remember a started emulator for :func:`reports`."""
    _started.append(emulator)


def forget() -> None:
    """Forget the emulators started so far (a new test begins)."""
    _started.clear()


def reports() -> str:
    """:func:`describe` of every emulator started since :func:`forget`: now while it runs,
    else as it was when it was stopped by a failure (nothing for one stopped cleanly); then
    what this process's job objects of the same names saw (:func:`followed`)."""
    texts = []
    for emulator in list(_started):
        if not emulator.closing:
            texts.append(describe(emulator))
        elif emulator.final_state:
            texts.append(f"(when it was stopped)\n{emulator.final_state}")
        else:
            continue
        texts += [text for name in _job_names(emulator) if (text := followed(name))]
    return "\n".join(texts)


def _job_names(emulator: Emulator) -> list[str]:
    kinds = ("PyTorchJob", "TFJob", "TrainJob")
    resources = [r for r in emulator.registry.served() if r.kind in kinds]
    return [o["metadata"]["name"] for r in resources for o in emulator.store.objects(r.key)[0]]


def followed(name: str, lines: int = 15) -> str | None:
    """The state, reason and last log lines of job ``name`` as this process follows it
    (``jupyter_disttrain.service``, when a test started the job through it), else None."""
    service = sys.modules.get("jupyter_disttrain.service")
    job = service.registered().get(name) if service is not None else None
    if job is None:
        return None
    out = [f"followed job {name}: {job.status()} ({job.reason or 'no reason'})"]
    for line in job.monitor.log_lines()[-lines:]:
        rank = "" if line.rank is None or line.rank < 0 else f"[rank {line.rank}] "
        out.append(f"  | {rank}{str(line.text).rstrip()[:200]}")
    return "\n".join(out)
