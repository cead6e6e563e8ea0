"""Run a command under a host name of its own: ``python nodehost.py NAME ARGV...``.

A node of a local job on ``--network isolated`` has its own host name, as a
pod does: this script (run by path, so that it imports no package) makes a
UTS namespace, names the host ``NAME`` there and becomes ``ARGV`` (``exec``:
the process id stays the one its owner started). Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWUTS = 0x04000000


def set_hostname(name: str) -> None:
    """Give this process (and what it starts) a UTS namespace of its own named ``name``."""
    libc = ctypes.CDLL(None, use_errno=True)
    raw = name.encode()
    if libc.unshare(CLONE_NEWUTS) != 0 or libc.sethostname(raw, len(raw)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot name this node's host {name!r}: {os.strerror(err)}")


def main(argv: list[str]) -> None:
    """``argv``: the host name, then the command to become."""
    if len(argv) < 2:
        raise SystemExit("usage: nodehost.py NAME COMMAND [ARG...]")
    set_hostname(argv[0])
    os.execvp(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
