"""The package versions a worker reports in its ``hello`` and its checkpoints record.

Which packages is the payload's to say (``versions_of``: its framework's
package, see ``Framework.payload_fields``); :func:`use` takes them from the
payload once the worker loaded it. Only modules already imported are
reported: asking never imports a framework.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable, Mapping
from typing import Any

_reported: list[str] = []


def use(payload: Mapping[str, Any]) -> None:
    """Report the packages the payload names (``versions_of``) from now on."""
    names = payload.get("versions_of") or ()
    _reported[:] = [str(name) for name in names if isinstance(name, str)]


def reported(extra: Iterable[str] = ()) -> dict[str, str]:
    """``python`` and each imported package of :func:`use`'s list and ``extra``: its version."""
    out = {"python": platform.python_version()}
    for name in dict.fromkeys([*_reported, *extra]):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = str(getattr(module, "__version__", "?"))
    return out
