"""torchrun's rendezvous and store timeouts scaled to the job's world size (pure).

torch's defaults fit small jobs: the c10d rendezvous reads its store within
60 s (``read_timeout``), a node joins within 600 s (``join_timeout``; the static
rendezvous of a fixed-size job waits ``timeout``, also 600 s). At a thousand
nodes one store serves every agent and torch's own store barrier allows
itself 10 s + 1 s per 1,000 ranks between checks (``distributed_c10d``), so
the timeouts here grow by the same factor, ``1 + world / 10,000``: 60 s and
600 s up to 1,000 ranks' worth of extra time, 110 s and 1,092 s at 8,192 ranks.

They are rendered only from :data:`SCALED_FROM` ranks on (below, torch's
defaults are what the job gets): as ``PET_RDZV_CONF`` (torchrun's
``--rdzv-conf``) in the pods, or, for an elastic PyTorchJob whose operator
writes ``PET_RDZV_CONF`` itself, as its ``elasticPolicy.rdzvConf``.
"""

from __future__ import annotations

import math
from typing import Final

#: torch's defaults: the c10d rendezvous's store read, and a node's join (static: ``timeout``).
READ_TIMEOUT: Final = 60
JOIN_TIMEOUT: Final = 600
#: World sizes from which the scaled timeouts are rendered.
SCALED_FROM: Final = 1000
ENV: Final = "PET_RDZV_CONF"


def scale(world: int) -> float:
    """The factor torch's store barrier grows by: (10 s + world/1,000 s) / 10 s."""
    return 1 + world / 10_000


def rendezvous_conf(world: int) -> dict[str, str]:
    """torchrun's ``--rdzv-conf`` for ``world`` ranks; empty below :data:`SCALED_FROM`.

    ``read_timeout`` (c10d store reads), ``join_timeout`` (c10d) and ``timeout``
    (the static rendezvous of a fixed-size job), in whole seconds.
    """
    if world < SCALED_FROM:
        return {}
    join = str(math.ceil(JOIN_TIMEOUT * scale(world)))
    return {
        "read_timeout": str(math.ceil(READ_TIMEOUT * scale(world))),
        "join_timeout": join,
        "timeout": join,
    }


def rendezvous_env(world: int) -> dict[str, str]:
    """``PET_RDZV_CONF`` for a job of ``world`` ranks (empty when torch's defaults hold)."""
    conf = rendezvous_conf(world)
    return {ENV: ",".join(f"{k}={v}" for k, v in conf.items())} if conf else {}


def rdzv_conf_items(world: int) -> list[dict[str, str]]:
    """The same as an elastic PyTorchJob's ``elasticPolicy.rdzvConf`` (key/value items)."""
    return [{"key": k, "value": v} for k, v in rendezvous_conf(world).items()]
