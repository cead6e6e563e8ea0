"""TensorFlow workers: the rank from ``TF_CONFIG`` and the job's ``MultiWorkerMirroredStrategy``.

The worker runtime calls :func:`init_worker` when the payload names it (the
TensorFlow framework's ``runtime``). Nothing here imports torch; TensorFlow
itself is imported by :func:`init` only.

Ranks: a ``chief`` (or ``master``) task is rank ``index`` and ``worker`` tasks
follow the chiefs, so a TFJob's ``<job>-chief-0`` is rank 0 and
``<job>-worker-0`` rank 1, and a local job's worker ``i`` (no chief: worker 0
acts as chief) is rank ``i``. One process per task: ``LOCAL_RANK`` is 0.

The cell finds the strategy as ``strategy``; ``tf.distribute.MultiWorkerMirroredStrategy()``
with no arguments in the cell returns that same object (a second strategy
would configure collective ops again). With arguments it builds a new one.
The class's ``reduce`` also takes what Keras' ``fit()`` gives it (see
:func:`patch_reduce`), and :func:`barrier` waits for every task.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

from .env import one_process_per_node

LEADERS = ("chief", "master")
#: ``TF_CPP_MIN_LOG_LEVEL`` unless the job sets one: TensorFlow's C++ INFO lines are hidden.
DEFAULT_LOG_LEVEL = "1"


class TFConfigError(RuntimeError):
    """``TF_CONFIG`` or the TensorFlow installation cannot run this worker (message says why)."""


def parse_tf_config(text: str) -> tuple[int, int, str]:
    """``(rank, world_size, task)`` of a ``TF_CONFIG`` JSON text; ``task`` is e.g. ``"worker:1"``.

    Raises :class:`TFConfigError` for malformed JSON, a task that is not a
    chief/master/worker (parameter servers and evaluators cannot run a cell)
    or an index outside the cluster.
    """
    try:
        config = json.loads(text)
        cluster = dict(config.get("cluster") or {})
        task = dict(config.get("task") or {})
        task_type = str(task.get("type", "")).lower()
        index = int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError) as exc:
        raise TFConfigError(f"TF_CONFIG is not valid: {exc}; got {text[:200]!r}") from None
    if not task_type:
        raise TFConfigError(f"TF_CONFIG has no task type; got {text[:200]!r}")
    leaders = sum(len(cluster.get(k) or []) for k in LEADERS)
    world = leaders + len(cluster.get("worker") or [])
    if task_type in LEADERS:
        rank = index
    elif task_type == "worker":
        rank = leaders + index
    else:
        raise TFConfigError(
            f"TF_CONFIG task type {task_type!r} cannot run a cell; jobs have chief and worker "
            "tasks only (MultiWorkerMirroredStrategy), no parameter servers or evaluators"
        )
    if not 0 <= rank < world:
        raise TFConfigError(f"TF_CONFIG task {task_type}:{index} is not in its cluster {cluster}")
    return rank, world, f"{task_type}:{index}"


def apply_env(environ: MutableMapping[str, str]) -> None:
    """Set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``... from ``TF_CONFIG``.

    Does nothing without ``TF_CONFIG``, when ``RANK`` is already set (a
    torchrun worker) or when ``TF_CONFIG`` is malformed (:func:`init` reports that).
    """
    text = environ.get("TF_CONFIG")
    if not text or "RANK" in environ:
        return
    try:
        rank, world, _ = parse_tf_config(text)
    except TFConfigError:
        return
    one_process_per_node(environ, rank, world)


def import_tensorflow() -> Any:
    """The ``tensorflow`` module; :class:`TFConfigError` naming the fix when it is missing."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LOG_LEVEL)
    try:
        import tensorflow
    except ImportError as exc:
        raise TFConfigError(
            f"TensorFlow is not installed in this worker ({exc}); install it with "
            "pip install 'jupyter_disttrain[tensorflow]' (tensorflow-cpu), or use an "
            "image with TensorFlow (--image tensorflow/tensorflow:VERSION)"
        ) from None
    return tensorflow


def init() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Join the cluster; return ``(backend, names for the cell, extra hello fields)``.

    Creates the job's strategy (see the module docstring), checks that every
    task answers with one all-reduce, and names the communication it uses:
    ``tf-ring`` (gRPC ring all-reduce, CPU) or ``tf-nccl`` (GPUs).
    """
    text = os.environ.get("TF_CONFIG")
    task = "worker:0"
    world = 1
    if text:
        _, world, task = parse_tf_config(text)
    tf = import_tensorflow()
    cls = tf.distribute.MultiWorkerMirroredStrategy
    patch_reduce(cls)
    strategy = shared_strategy(cls)
    joined = barrier()
    if joined != world:
        raise TFConfigError(f"{joined} of the {world} TensorFlow tasks joined the all-reduce")
    backend = "tf-nccl" if tf.config.list_physical_devices("GPU") else "tf-ring"
    return backend, {"strategy": strategy}, {"task": task}


def init_worker(payload: dict[str, Any], rank: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The framework set-up the worker calls (see ``runtime/worker.py``): :func:`init`."""
    return init()


def barrier() -> int:
    """Wait until every task of the job gets here; return how many there are.

    An all-reduce on the job's strategy (1 outside a job), so every task
    must call it at the same point of the cell, like any collective.
    """
    tf = sys.modules.get("tensorflow")
    strategy = getattr(getattr(tf, "distribute", None), "MultiWorkerMirroredStrategy", None)
    strategy = getattr(strategy, "_distrain_shared", None)
    if tf is None or strategy is None:
        return 1
    count = _counters.get(id(strategy)) or _counter(tf, strategy)
    return int(count().numpy())


_counters: dict[int, Callable[[], Any]] = {}


def _counter(tf: Any, strategy: Any) -> Callable[[], Any]:
    """A graph function summing 1 over every replica (no eager-collective overhead)."""

    def count() -> Any:
        ones = strategy.run(lambda: tf.constant(1.0))
        return strategy.reduce("SUM", ones, axis=None)

    compiled: Callable[[], Any] = tf.function(count)
    _counters[id(strategy)] = compiled
    return compiled


def shared_strategy(cls: Any) -> Any:
    """Create the job's strategy and make ``cls()`` (no arguments) return it from now on."""
    existing = getattr(cls, "_distrain_shared", None)
    if existing is not None:
        return existing
    real_init: Callable[..., None] = cls.__init__

    def __new__(klass: Any, *args: Any, **kwargs: Any) -> Any:
        shared = cls.__dict__.get("_distrain_shared")
        if klass is cls and shared is not None and not args and not kwargs:
            return shared
        return object.__new__(klass)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if self is cls.__dict__.get("_distrain_shared"):
            return  # already initialised: cls() handed out the job's strategy
        real_init(self, *args, **kwargs)

    strategy = cls()
    cls.__new__ = staticmethod(__new__)
    cls.__init__ = __init__
    cls._distrain_shared = strategy
    return strategy


def patch_reduce(cls: Any) -> None:
    """Let ``cls.reduce`` take nested values and scalars with an ``axis`` (idempotent).

    Keras 3's ``fit()`` passes a whole (x, y) batch, and scalar losses with
    ``axis=0``, to ``Strategy.reduce`` under a multi-worker strategy, which
    TensorFlow rejects. Each leaf is reduced on its own, and a scalar
    ignores ``axis`` (there is nothing to reduce along); other calls are unchanged.
    """
    if getattr(cls.reduce, "_distrain_patched", False):
        return
    real_reduce: Callable[..., Any] = cls.reduce

    def reduce(self: Any, reduce_op: Any, value: Any, axis: Any = None) -> Any:
        import tensorflow as tf

        def one(leaf: Any) -> Any:
            return real_reduce(self, reduce_op, leaf, None if _rank(leaf) == 0 else axis)

        if tf.nest.is_nested(value):
            return tf.nest.map_structure(one, value)
        return one(value)

    reduce._distrain_patched = True  # type: ignore[attr-defined]
    reduce.__doc__ = real_reduce.__doc__
    cls.reduce = reduce


def _rank(value: Any) -> int | None:
    """Number of dimensions of a tensor or of a distributed value's components."""
    parts = getattr(value, "values", None)
    sample = parts[0] if isinstance(parts, tuple) and parts else value
    shape = getattr(sample, "shape", None)
    rank = getattr(shape, "rank", None) if shape is not None else None
    if rank is None and shape is not None:
        try:
            rank = len(shape)
        except TypeError:
            return None
    return int(rank) if rank is not None else None
