"""Replacing a whole file so that a reader sees the old or the new one, never a mix.

Standard library only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes, *, prefix: str = ".tmp-", durable: bool = False) -> None:
    """Write ``data`` to a new file beside ``path`` (mode 0600), then put it in ``path``'s place.

    ``durable``: flushed to the disk before it replaces the old file. A failure
    leaves the old file and no temporary one.
    """
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
