"""Where this user's job state lives on this machine, whatever the backend.

:func:`home` is ``$DISTRAIN_HOME``, else ``$XDG_DATA_HOME/jupyter_disttrain``, else
``~/.local/share/jupyter_disttrain``. The local backend keeps its jobs under
``jobs/``; a backend whose jobs run elsewhere keeps only the view records of the jobs
followed here (:func:`views_root`).
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The root of this user's job state here."""
    explicit = os.environ.get("DISTRAIN_HOME")
    if explicit:
        return Path(explicit)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(data) / "jupyter_disttrain"


def views_root(backend: str) -> Path:
    """The directory of the view records of ``backend``'s jobs followed here."""
    return home() / "views" / backend
