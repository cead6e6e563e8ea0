"""Which warm launcher a process may share: same Python environment, same import-time variables.

A warm launcher has imported torch and the runtime once; what it forks
inherits that state. A process may use a launcher another process started
(the Jupyter server's) only when forking from it gives what its own launcher
would: the same interpreter and environment (``sys.prefix``, version) and
the same value of every variable read while Python and torch import
(:func:`relevant_env`). Everything else (working directory, the rest of the
environment, ``sys.path``) is applied to each job the launcher forks, but
a module the launcher has already imported stays the one it imported: a
process whose ``sys.path`` would import another file for one of them
(:func:`differing_modules`) must not use the launcher for that job.

A private socket: :func:`check_private` refuses a socket another user could
have made or can reach, :func:`peer_uid` tells who is at the other end,
:func:`connect_own` connects only to a launcher of this user and :func:`ask`
puts one request to it.
Standard library only.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import socket
import stat
import struct
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

#: Variables whose names start with one of these are read while Python, torch and the
#: libraries they load import (search paths, preloads, thread pools, devices, allocators).
RELEVANT_PREFIXES = (
    "PYTHON",
    "LD_",
    "TORCH",
    "PYTORCH",
    "CUDA",
    "NVIDIA",
    "OMP_",
    "KMP_",
    "MKL",
    "OPENBLAS",
    "GOMP",
    "NUMEXPR",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "MALLOC",
    "HIP",
    "ROCM",
)
#: Set by the launcher itself before it imports (``zygote.main``), so never a difference.
LAUNCHER_DEFAULTS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: Carries the kernel's ``sys.path`` to each process a launcher forks for it (JSON list).
ENV_SYS_PATH = "DISTRAIN_SYS_PATH"


def requested_sys_path(env: Mapping[str, str]) -> list[str] | None:
    """The ``sys.path`` a requester sent in ``env`` (:data:`ENV_SYS_PATH`, a JSON list of
    strings); None when it sent none, or anything else."""
    try:
        paths = json.loads(env.get(ENV_SYS_PATH) or "null")
    except ValueError:
        return None
    if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
        return paths
    return None


def apply_sys_path(env: Mapping[str, str]) -> None:
    """Make ``sys.path`` the one the requester sent in ``env``, when it sent one."""
    paths = requested_sys_path(env)
    if paths is not None:
        sys.path[:] = paths


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` that decides what an import of Python and torch gives."""
    return {
        k: v
        for k, v in env.items()
        if k.startswith(RELEVANT_PREFIXES) and k not in LAUNCHER_DEFAULTS and k != ENV_SYS_PATH
    }


def identity(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What two processes must share to fork from one launcher (JSON-ready): the
    interpreter and, for each variable of :func:`relevant_env`, a digest of its value
    (names and digests only, so a difference can be named without showing a value)."""
    chosen = relevant_env(os.environ if env is None else env)
    return {
        "prefix": sys.prefix,
        "exec_prefix": sys.exec_prefix,
        "version": sys.version,
        "env": {name: _digest(value) for name, value in sorted(chosen.items())},
    }


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]


def difference(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """What differs between this process's :func:`identity` (``ours``) and a launcher's
    (``theirs``), for a message: "" when nothing does."""
    parts = [
        f"its {key} is {theirs.get(key)!r}, not {ours.get(key)!r}"
        for key in ("prefix", "exec_prefix", "version")
        if theirs.get(key) != ours.get(key)
    ]
    mine, its = ours.get("env"), theirs.get("env")
    if not isinstance(its, dict) or not isinstance(mine, dict):
        return "; ".join([*parts, "it does not say which variables it was started with"])
    only_its = sorted(set(its) - set(mine))
    only_mine = sorted(set(mine) - set(its))
    changed = sorted(name for name in set(its) & set(mine) if its[name] != mine[name])
    if only_its:
        parts.append("it was started with " + ", ".join(only_its) + " set (unset here)")
    if only_mine:
        parts.append("it was started without " + ", ".join(only_mine) + " (set here)")
    if changed:
        parts.append("it was started with other values of " + ", ".join(changed))
    return "; ".join(parts)


def imported_from() -> dict[str, str]:
    """The top-level modules this process has imported from files outside the standard
    library: name -> the file (real path) they came from."""
    stdlib = set(sys.stdlib_module_names)
    out: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if "." in name or name in stdlib or name.startswith("_") or not isinstance(origin, str):
            continue
        out[name] = os.path.realpath(origin)
    return out


def changed_since(started: float, modules: Iterable[ModuleType] | None = None) -> str | None:
    """A file of a module this process imported (of ``modules``, when given) that was
    modified after ``started`` (a package upgraded or edited since: forking would run the
    old code); None when none. A file that cannot be read (gone, inside an archive) is
    passed over."""
    for module in list(sys.modules.values()) if modules is None else modules:
        origin = getattr(module, "__file__", None)
        if not isinstance(origin, str):
            continue
        try:
            if os.stat(origin).st_mtime > started:
                return origin
        except OSError:
            continue
    return None


def differing_modules(imported: Mapping[str, str], path: list[str]) -> dict[str, str]:
    """Of a launcher's ``imported`` modules (:func:`imported_from`), those that ``path`` (a
    ``sys.path``) would import from another file: name -> the file ``path`` finds."""
    out: dict[str, str] = {}
    for name, origin in sorted(imported.items()):
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        except (ImportError, ValueError):
            continue
        found = spec.origin if spec is not None else None
        if found and found not in ("built-in", "frozen") and os.path.realpath(found) != origin:
            out[name] = os.path.realpath(found)
    return out


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a connected AF_UNIX socket."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def connect_own(path: str, timeout: float | None = None) -> socket.socket:
    """A blocking connection to the Unix socket at ``path`` served by a process of this user.

    Raises ``PermissionError`` when another user serves it, and the ``OSError`` of the
    connection otherwise (refused, missing, timed out); the socket is closed on any failure.
    """
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(path)
        if peer_uid(conn) != os.getuid():
            raise PermissionError(f"the launcher at {path} is run by another user")
        conn.settimeout(None)
    except BaseException:
        conn.close()
        raise
    return conn


def ask(conn: socket.socket, op: str, timeout: float | None) -> dict[str, Any]:
    """Send ``{"op": op}`` on ``conn`` and read its one-line JSON answer; ``{}`` for none.

    Raises ``OSError`` when the answer does not come within ``timeout`` and ``ValueError``
    when it is not JSON (a JSON value that is not an object is returned as ``{}``).
    """
    conn.settimeout(timeout)
    conn.sendall((json.dumps({"op": op}) + "\n").encode())
    answer = json.loads(conn.makefile("rb").readline() or b"{}")
    conn.settimeout(None)
    return answer if isinstance(answer, dict) else {}


def thread_count() -> int:
    """OS threads in this process (a large number where it cannot be read)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1 << 30


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    """Write one JSON line; a vanished peer is not an error."""
    try:
        conn.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass


def check_private(path: str) -> None:
    """Raise ``PermissionError`` unless ``path`` is our socket, 0600, in our own 0700 directory."""
    uid = os.getuid()
    folder = os.path.dirname(path) or "."
    d = os.lstat(folder)
    if not stat.S_ISDIR(d.st_mode) or d.st_uid != uid or d.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a directory of this user with mode 0700")
    s = os.lstat(path)
    if not stat.S_ISSOCK(s.st_mode) or s.st_uid != uid or s.st_mode & 0o077:
        raise PermissionError(f"{path} is not a socket of this user with mode 0600")
