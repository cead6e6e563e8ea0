"""Heavy imports without the cyclic garbage collector's passes over them.

Importing torch, ``torch._dynamo`` or TensorFlow makes half a million to a
million objects that all live on. While they are made, the collector's full
passes walk the growing heap again and again: on these machines that was a
quarter to a third of the import's time (TensorFlow 12-15 s with the collector,
8.5-9.5 s without). Standard library only: workers and launchers import it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block; afterwards as it was before (a collector the
    caller turned off stays off). Nests."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextmanager
def frozen() -> Iterator[None]:
    """:func:`paused` inside the block; when it ends without an exception, what lives then
    is frozen (:func:`gc.freeze`): no later pass walks the block's imports again, nor
    copies their pages in a forked child."""
    with paused():
        yield
        gc.freeze()
