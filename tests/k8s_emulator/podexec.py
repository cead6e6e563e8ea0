"""Start one container process inside its pod: the pod's network, its own mounts, its host name.

Run as ``python -I -S podexec.py CONFIG`` (``CONFIG`` a JSON object, see
:func:`launch_argv`), with the container's environment; it then replaces
itself (``exec``) with the container's command, so the process the kubelet
waits for is the container's. Steps, as a container runtime takes them:

1. enter the pod's network namespace (``setns``), unless the pod uses the
   host's network;
2. a mount and UTS namespace of its own (``unshare``), mounts private, the
   pod's host name set;
3. a root made of the host's top-level entries (bind mounts, as an image
   would give its files), where the folders a volume or the working directory
   needs are made in the pod's own directory, never on the host;
4. each volume bound at its ``mountPath`` (read-only ones remounted so), the
   kubelet's ``/etc/hosts`` and ``/etc/hostname`` over the host's;
5. ``chroot`` into that root, ``chdir`` to the working directory, ``exec``.

A failure before ``exec`` prints ``podexec: <reason>`` and exits 128.

With ``warm`` (a socket path) in ``CONFIG``, a warm image forks the container's
process instead (:mod:`warmimage`, which takes the steps above in the fork):
this process sends it its standard streams and environment, passes on every
signal it gets to the forked process, and ends as that process ended. When the
warm image refuses or cannot be reached, the steps above are taken here.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys
import time
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def launch_argv(python: str, config: dict[str, Any]) -> list[str]:
    """The argv that starts a container through this file: ``config`` has ``netns`` (a path
    or None), ``hostname``, ``root`` (the pod's root folder), ``mounts`` ([source, target,
    read-only]), ``cwd`` and ``argv``."""
    return [python, "-I", "-S", os.path.abspath(__file__), json.dumps(config)]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, flags: int) -> None:
    _check(_libc.mount(source.encode(), target.encode(), None, flags, None), f"mount {target}")


def _shadowed(targets: list[str]) -> set[str]:
    """Host folders that must be copies (folders of their own) in the pod's root, because a
    path below them has to be made: the ancestors of each target's first missing part."""
    out = {"/"}
    for target in targets:
        parts = target.strip("/").split("/")
        path = ""
        for part in parts:
            child = f"{path}/{part}"
            if not os.path.lexists(child):
                break
            path = child
        else:
            continue  # it exists: mounted over, nothing to make
        while path:
            out.add(path)
            path = os.path.dirname(path) if path != "/" else ""
            if path == "/":
                break
    return out


def _populate(host: str, root: str, shadowed: set[str]) -> None:
    """Make ``root + host`` show ``host``'s entries (bind mounts; copies where shadowed)."""
    for entry in sorted(os.listdir(host)):
        source = os.path.join(host, entry)
        target = root + source
        if os.path.islink(source):
            if not os.path.lexists(target):
                os.symlink(os.readlink(source), target)
        elif source in shadowed and os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
            _populate(source, root, shadowed)
        elif os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
            # the folder holding the pod's root is bound alone (not the pod's root again)
            inner = root.startswith(source + "/")
            _mount(source, target, MS_BIND if inner else MS_BIND | MS_REC)
        else:
            if not os.path.exists(target):
                open(target, "ab").close()
            _mount(source, target, MS_BIND)


def _enter(config: dict[str, Any]) -> None:
    if config.get("netns"):
        fd = os.open(config["netns"], os.O_RDONLY)
        _check(_libc.setns(fd, CLONE_NEWNET), "setns")
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _mount("none", "/", MS_REC | MS_PRIVATE)
    name = config["hostname"].encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    root = config["root"]
    mounts = [(src, os.path.realpath(dst), ro) for src, dst, ro in config["mounts"]]
    cwd = os.path.realpath(config["cwd"])
    shadowed = _shadowed([dst for _, dst, _ in mounts] + [cwd])
    os.makedirs(root, exist_ok=True)
    _mount(root, root, MS_BIND)  # a mount of its own, so that chroot leaves the rest behind
    _populate("/", root, shadowed)
    for source, target, read_only in sorted(mounts, key=lambda m: len(m[1])):
        inside = root + target
        if os.path.isdir(source):
            os.makedirs(inside, exist_ok=True)
        elif not os.path.exists(inside):
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            open(inside, "ab").close()
        _mount(source, inside, MS_BIND | MS_REC)
        if read_only:
            _mount(source, inside, MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.makedirs(root + cwd, exist_ok=True)
    os.chroot(root)
    os.chdir(cwd)


#: Signals a stand-in passes on to the process a warm image forked for it.
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGABRT,
)


def _ask_warm(config: dict[str, Any]) -> socket.socket | None:
    """Send the container to the warm image at ``config["warm"]``: the connection on which
    it will say how the process ended, or None when it refused or is not there."""
    request = {"config": config, "argv": config["argv"], "env": dict(os.environ)}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(config["warm"])
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    except OSError:
        sock.close()
        return None
    return sock


def _stand_in(sock: socket.socket, config: dict[str, Any]) -> None:
    """Stand in for the forked process: pass on signals, end as it ended (or start the
    container of ``config`` here when the warm image refuses it)."""
    child = [0]
    pending: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        if child[0]:
            os.kill(child[0], sig)
        else:
            pending.append(sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        try:
            data = sock.recv(4096)
        except InterruptedError:
            continue
        if not data:  # the warm image ended first: wait for the process itself
            while child[0] and _alive(child[0]):
                time.sleep(0.05)
            os._exit(137)
        said = json.loads(data)
        if said.get("cold"):
            sock.close()
            return _start_cold(config)
        if "pid" in said:
            child[0] = said["pid"]
            for sig in pending:
                os.kill(child[0], sig)
            continue
        status = said["status"]
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> None:
    config = json.loads(sys.argv[1])
    if config.get("warm"):
        sock = _ask_warm(config)
        if sock is not None:
            _stand_in(sock, config)
            return
    _start_cold(config)


def _start_cold(config: dict[str, Any]) -> None:
    try:
        _enter(config)
    except OSError as exc:
        print(f"podexec: {exc}", file=sys.stderr, flush=True)
        os._exit(128)
    argv = config["argv"]
    try:
        os.execvpe(argv[0], argv, os.environ)
    except OSError as exc:
        print(f"podexec: exec {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(128)


if __name__ == "__main__":
    main()
