"""The socket interface settings of a rank, checked against the interfaces it has.

Standard library only. gloo given ``GLOO_SOCKET_IFNAME=eth1`` in a pod that
has only ``eth0`` fails deep in its set-up ("Unable to find address for:
eth1"); the rank says instead which setting names which missing interface
and what it has.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

#: The interface list gloo reads (comma-separated exact names).
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"


class InterfaceError(RuntimeError):
    """A socket interface setting names an interface this host or pod does not have."""


def interfaces() -> list[str]:
    """The names of this network namespace's interfaces, sorted."""
    return sorted(name for _, name in socket.if_nameindex())


def check_gloo_ifname(environ: Mapping[str, str], present: list[str]) -> None:
    """Raise :class:`InterfaceError` when ``GLOO_SOCKET_IFNAME`` names an interface not in
    ``present``: ``GLOO_SOCKET_IFNAME=eth1: no such interface here (it has eth0, lo); ...``."""
    value = environ.get(GLOO_IFNAME, "")
    missing = [name for name in value.split(",") if name.strip() and name.strip() not in present]
    if not missing:
        return
    has = ", ".join(present) or "none"
    host = socket.gethostname()
    raise InterfaceError(
        f"{GLOO_IFNAME}={value}: no such interface {', '.join(missing)} on {host} (it has "
        f"{has}); set {GLOO_IFNAME} to the interface the nodes share, or leave it unset"
    )
