"""A warm image: pods of the stock training command fork from an interpreter that has imported.

A real kubelet starts every container from its image, so each pod of a job
imports torch afresh (3-5 s of CPU each on these machines); a run of the
suite starts hundreds. For the one command every training pod runs,
``python -u -m jupyter_disttrain.runtime.podlaunch PAYLOAD``, the emulator
keeps a process that has imported what that module imports before its first
fork (:data:`jupyter_disttrain.runtime.forked.PRELOAD`, the product's own
list, less the product: a pod imports the runtime its job shipped). Each
such container is a fork of it that does what :mod:`podexec` does (the pod's
network, mounts, host name, ``chroot``), takes the container's environment,
``sys.argv``, ``sys.path``, standard streams and working directory, and runs
the module as ``__main__``. It shows the container's command line and
environment in ``/proc`` (``prctl(PR_SET_MM_MAP)``), so the kubelet finds and
kills it as any container process.

The kubelet still starts ``podexec.py`` and waits for it: with a ``warm``
socket in its configuration it sends its standard streams here, stands in for
the forked process (passes on the signals it gets, ends as the forked process
ended) and falls back to starting the container itself when this is not
available. A warm image is made per set of import-time variables
(:func:`launcher_identity.relevant_env`), the first time a pod needs it, and
ends with the process that made it (its standard input closes). Imports are
what this skips; what a pod does after them is the product's code, run as in a
cold pod. ``Emulator(warm_image=False)`` starts every container cold.

A warm image runs this file with ``SOCKET`` as its argument (:data:`_SERVE`)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

#: The command a warm image serves: the pod launcher of the stock training image.
MODULE = "jupyter_disttrain.runtime.podlaunch"
PR_SET_MM, PR_SET_MM_MAP = 35, 14
#: Fields of /proc/self/stat (1-based) giving struct prctl_mm_map's values in order.
_STAT_FIELDS = {"start_code": 26, "end_code": 27, "start_data": 45, "end_data": 46}
_STAT_FIELDS |= {"start_brk": 47, "start_stack": 28}
_MESSAGE_MAX = 1 << 20
#: How a warm image starts: ``python -u`` as the pod's own interpreter, with ``sys.path[0]``
#: its (empty) working folder, not this one (whose modules have the standard library's names).
_SERVE = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


def served_argv(argv: list[str]) -> bool:
    """Whether a container's ``argv`` is the command a warm image runs."""
    return argv[:4] == [sys.executable, "-u", "-m", MODULE]


class WarmImages:
    """The warm images of this process: one per set of import-time variables."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[tuple[tuple[str, str], ...], str | None] = {}
        self._procs: list[subprocess.Popen[bytes]] = []

    def socket_for(self, argv: list[str], env: Mapping[str, str]) -> str | None:
        """The socket of the warm image for a container of ``argv`` and ``env`` (started
        now when it is the first); None when the container must start cold."""
        if not served_argv(argv):
            return None
        from jupyter_disttrain.runtime.launcher_identity import relevant_env

        key = tuple(sorted(relevant_env(env).items()))
        with self._lock:
            if key not in self._servers:
                self._servers[key] = self._start(dict(key), env)
            return self._servers[key]

    def _start(self, relevant: dict[str, str], env: Mapping[str, str]) -> str | None:
        folder = tempfile.mkdtemp(prefix="k8s-warm-")
        path = os.path.join(folder, "s")
        base = {k: v for k, v in env.items() if k in ("PATH", "LANG", "LC_ALL")}
        server_env = {**base, **relevant, "HOME": folder, "TMPDIR": folder}
        with open(os.path.join(folder, "log"), "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-u", "-c", _SERVE, os.path.abspath(__file__), path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=folder,
                env=server_env,
            )
        assert proc.stdout is not None
        said = proc.stdout.readline().strip()  # "ready", or nothing when it could not start
        proc.stdout.close()
        if said != b"ready":
            proc.kill()
            proc.wait()
            with open(os.path.join(folder, "log"), errors="replace") as failed:
                reason = said.decode(errors="replace") or failed.read()[-2000:]
            print(f"k8s emulator: no warm image, pods start cold: {reason}", file=sys.stderr)
            return None
        self._procs.append(proc)
        return path

    def close(self) -> None:
        """End every warm image (the pods forked from them are the kubelets' to end)."""
        with self._lock:
            procs, self._procs = self._procs, []
            self._servers.clear()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)


#: This process's warm images (each emulator's kubelet asks here); they end with it.
IMAGES = WarmImages()
atexit.register(IMAGES.close)


# --- the warm image itself ---------------------------------------------------------------


class _MMMap(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "start_code end_code start_data end_data start_brk brk start_stack "
            "arg_start arg_end env_start env_end"
        ).split()
    ] + [("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.sbrk.restype = ctypes.c_void_p
_kept: list[ctypes.Array[ctypes.c_char]] = []
_kept_streams: list[Any] = []
#: :mod:`podexec`, loaded once before the first fork.
_podexec: list[Any] = []


def show_in_proc(argv: list[str], env: Mapping[str, str]) -> None:
    """Make ``/proc/self/cmdline`` and ``/proc/self/environ`` (and those of every process
    forked from here) read ``argv`` and ``env``; OSError when the kernel refuses."""
    with open("/proc/self/stat") as stat:
        text = stat.read()
    fields = text[text.rindex(")") + 2 :].split()
    values = {name: int(fields[number - 3]) for name, number in _STAT_FIELDS.items()}
    regions = []
    for items in (argv, [f"{k}={v}" for k, v in env.items()]):
        data = b"".join(item.encode(errors="surrogateescape") + b"\0" for item in items)
        buffer = ctypes.create_string_buffer(data, len(data))
        _kept.append(buffer)
        regions += [ctypes.addressof(buffer), ctypes.addressof(buffer) + len(data)]
    mm = _MMMap(**values, brk=_libc.sbrk(0), auxv=None, auxv_size=0, exe_fd=0xFFFFFFFF)
    mm.arg_start, mm.arg_end, mm.env_start, mm.env_end = regions
    if _libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_MM_MAP): {os.strerror(err)}")


def _sibling(name: str) -> Any:
    """This folder's module ``name`` (the folder is not on a warm image's ``sys.path``)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_k8s_emulator_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fresh_stdio() -> None:
    """Standard streams made anew over descriptors 0-2, as ``python -u`` makes them at start
    (the image's were made over its own descriptors: a file is seekable, a pipe is not)."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        _kept_streams.append(old)  # never closed: it would close the descriptor
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        stream = io.TextIOWrapper(
            io.BufferedReader(raw) if fd == 0 else raw,  # type: ignore[arg-type]
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=fd != 0 and os.isatty(fd),
            write_through=fd != 0,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the container's process and run its command; never
    returns."""
    import importlib
    import runpy

    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _fresh_stdio()
        argv, env = request["argv"], request["env"]
        show_in_proc(argv, env)
        os.environ.clear()
        os.environ.update(env)
        _podexec[0]._enter(request["config"])
        sys.path[0] = os.getcwd()  # as -m puts it
        sys.path_importer_cache.clear()  # folders the image could not see may exist here
        importlib.invalidate_caches()
        tempfile.tempdir = None
        sys.argv = [argv[3], *argv[4:]]
    except OSError as exc:
        print(f"podexec: {exc}", file=sys.stderr, flush=True)
        os._exit(128)
    try:
        runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            from jupyter_disttrain.runtime.worker import exit_process  # the job's own copy

            exit_process(code)  # atexit handlers, flushed streams, then os._exit
        finally:
            os._exit(code)  # never back into the image's loop


class _Server:
    """Accepts a container's request, forks it, tells its stand-in the pid, then how it
    ended; a stand-in that goes away takes its process with it (SIGKILL)."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(128)
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(0, selectors.EVENT_READ, "lifeline")
        self.selector.register(self.wake_read, selectors.EVENT_READ, "reap")
        self.children: dict[int, socket.socket] = {}

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "lifeline" and not os.read(0, 4096):
                    return
                if key.data == "accept":
                    self._accept()
                elif key.data == "reap":
                    self._reap()
                elif isinstance(key.data, int):
                    self._stand_in_gone(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, _MESSAGE_MAX, 3)
        if len(fds) != 3 or len(os.listdir("/proc/self/task")) != 1:
            for fd in fds:
                os.close(fd)
            conn.send(b'{"cold": true}')  # a fork here would not be safe: start it cold
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            for sock in (self.listener, conn, *self.children.values()):
                sock.close()
            os.close(self.wake_read)
            os.close(self.wake_write)
            _become(json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        conn.send(json.dumps({"pid": pid}).encode())

    def _reap(self) -> None:
        while True:
            try:
                os.read(self.wake_read, 4096)
            except BlockingIOError:
                break
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(KeyError):  # unless its stand-in went away first
                    self.selector.unregister(conn)
                try:
                    conn.send(json.dumps({"status": status}).encode())
                except OSError:
                    pass
                conn.close()

    def _stand_in_gone(self, conn: socket.socket, pid: int) -> None:
        if conn.recv(1):
            return  # a stand-in says nothing; anything else is ignored
        self.selector.unregister(conn)  # closed when its child has ended
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _proc_self(name: str) -> list[str]:
    with open(f"/proc/self/{name}", "rb") as f:
        return [part.decode(errors="surrogateescape") for part in f.read().split(b"\0")[:-1]]


def _import_ahead() -> None:
    """Import what the pod launcher imports before its first fork, but for the product's
    own modules: a pod imports the runtime shipped with its job (``PYTHONPATH``)."""
    import importlib

    from jupyter_disttrain.runtime.forked import PRELOAD, single_threaded_pools

    single_threaded_pools()
    for name in PRELOAD:
        if name.partition(".")[0] != "jupyter_disttrain":
            try:
                importlib.import_module(name)
            except Exception:
                pass  # the pod's own import says why
    for name in list(sys.modules):
        if name.partition(".")[0] == "jupyter_disttrain":
            del sys.modules[name]


def main(path: str) -> None:
    try:  # refused here: refused in every fork
        show_in_proc(_proc_self("cmdline"), dict(e.split("=", 1) for e in _proc_self("environ")))
    except OSError as exc:
        print(f"cannot show a container's command line in /proc: {exc}", flush=True)
        return
    _import_ahead()
    _podexec.append(_sibling("podexec"))
    server = _Server(path)
    print("ready", flush=True)
    try:
        server.serve()
    finally:
        import shutil

        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[-1])
