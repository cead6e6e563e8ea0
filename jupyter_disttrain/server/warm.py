"""The Jupyter server's warm launcher: one per server, shared by the kernels it starts.

When the server extension loads it starts a launcher (``runtime/zygote.py``,
the same one a kernel starts for itself) with the server's interpreter and
environment, in a private directory (0700, the socket 0600), and puts the
socket's path in the server's own environment as ``DISTRAIN_WARM_LAUNCHER``:
every kernel the server starts afterwards inherits it. A kernel uses that
launcher only when it may (same user, same Python environment and
import-time variables; see :func:`~jupyter_disttrain.backends.local.launcher.server_launcher`);
others start their own as before. The server holds the launcher's stdin, so
the launcher ends when the server ends, however it ends (its jobs with it).
Idle, it sleeps in ``select`` and uses no CPU.

``c.DistrainMagics.prewarm = False`` in the server's configuration (the
option a kernel's ``%distrain_config prewarm=`` sets) starts none.
"""

from __future__ import annotations

import os
from typing import Any

from ..backends.local.launcher import ENV_WARM, Launcher

_started: Launcher | None = None


def wanted(config: Any) -> bool:
    """False when the server's configuration says ``DistrainMagics.prewarm = False``."""
    section = config.get("DistrainMagics", {}) if hasattr(config, "get") else {}
    value = section.get("prewarm", True) if hasattr(section, "get") else True
    return bool(value)


def start() -> Launcher:
    """Start the server's launcher (once) and name it to the kernels started from now on."""
    global _started
    if _started is None or not _started.alive():
        if _started is not None:
            _started.close()
        _started = Launcher()
        os.environ[ENV_WARM] = _started.socket_path
    return _started


def stop() -> None:
    """End the server's launcher (and every job in it); kernels started later start their own."""
    global _started
    os.environ.pop(ENV_WARM, None)
    if _started is not None:
        _started.close()
        _started = None
