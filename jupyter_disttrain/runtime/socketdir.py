"""A private folder for a Unix socket, on a path short enough to bind.

A Unix socket's path holds at most 107 bytes (``sun_path``, 108 with its
terminating zero). A deep temporary folder (a CI runner's, pytest's, a
cluster's per-job ``TMPDIR``) leaves no room for a folder and a socket name,
and ``bind`` then fails with a bare ``OSError``. Standard library only.
"""

from __future__ import annotations

import os
import tempfile

#: Bytes a Unix socket's path may hold (``sun_path``, with its terminating zero).
MAX_SOCKET_PATH = 108
#: Where a socket's folder is made when the temporary folder cannot hold it, in order.
FALLBACKS = ("/tmp", "/dev/shm")


def private_socket_path(prefix: str, name: str) -> str | None:
    """``name`` in a new folder (``prefix`` + random, mode 0700) of the temporary folder,
    else of ``/tmp`` or ``/dev/shm`` when that path would be too long to bind or the folder
    cannot be made there; None when no such folder can be made. The caller removes it."""
    for base in (tempfile.gettempdir(), *FALLBACKS):
        try:
            directory = tempfile.mkdtemp(prefix=prefix, dir=base)
        except OSError:
            continue
        path = os.path.join(directory, name)
        if len(os.fsencode(path)) < MAX_SOCKET_PATH:
            return path
        os.rmdir(directory)
    return None


def no_socket_folder(prefix: str, name: str) -> str:
    """What to tell a user for whom :func:`private_socket_path` found no folder."""
    return (
        f"no folder for the socket {name}: the temporary folder ({tempfile.gettempdir()}) "
        f"is too deep for a {MAX_SOCKET_PATH - 1}-byte Unix socket path or cannot be written, "
        f"and neither can {' or '.join(FALLBACKS)} ({prefix}* folders); set TMPDIR to a "
        "short folder you can write"
    )
