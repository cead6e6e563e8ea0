"""JAX workers: ``jax.distributed.initialize()`` from the environment, before the cell runs.

The worker runtime calls :func:`init_worker` when the payload names it (the
JAX framework's ``runtime``). Nothing here imports torch; JAX itself is
imported by :func:`init` only.

The environment is Kubeflow Trainer's ``jax-distributed`` runtime's:
``JAX_COORDINATOR_ADDRESS`` (process 0's ``host:port``), ``JAX_NUM_PROCESSES``
and ``JAX_PROCESS_ID`` (a pod's completion index). One process per pod, so
a process's rank is its process id (:func:`apply_env`); the local backend
sets ``RANK``... itself for ``--nproc`` processes per node. With the
coordinator on 127.0.0.1 (a local job) it listens there only, and the
CPU collectives (gloo) connect on loopback too.

The job's store (the relay of other processes' lines, the hang watch and
``where``) is JAX's own coordination service's key-value store
(:class:`CoordinationStore`), registered as the runtime's default store: it
needs no port of its own and works in any JAX image.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

from . import jobstore
from .env import one_process_per_node

ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
#: Seconds every process has to reach the coordinator (``DISTRAIN_PG_TIMEOUT`` bounds it).
INIT_TIMEOUT = 300
#: A blocking store read waits this long per round (the store's ``get`` blocks until set).
GET_ROUND_MS = 60_000


class JaxSetupError(RuntimeError):
    """The environment or the JAX installation cannot run this worker (message says why)."""


def cluster(environ: MutableMapping[str, str]) -> tuple[str, int, int]:
    """``(coordinator address, number of processes, process id)`` from the environment."""
    address = environ.get(ENV_COORDINATOR, "")
    try:
        num = int(environ.get(ENV_NUM_PROCESSES, "1"))
        pid = int(environ.get(ENV_PROCESS_ID, "0"))
    except ValueError:
        raise JaxSetupError(
            f"{ENV_NUM_PROCESSES}={environ.get(ENV_NUM_PROCESSES)!r} and "
            f"{ENV_PROCESS_ID}={environ.get(ENV_PROCESS_ID)!r} must be integers"
        ) from None
    if not 0 <= pid < num:
        raise JaxSetupError(f"{ENV_PROCESS_ID}={pid} is not a process of {num}")
    if num > 1 and ":" not in address:
        raise JaxSetupError(
            f"{ENV_COORDINATOR}={address!r} must be host:port of process 0 for {num} processes"
        )
    return address, num, pid


def apply_env(environ: MutableMapping[str, str]) -> None:
    """Set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``... from ``JAX_PROCESS_ID`` (one per pod).

    Does nothing without ``JAX_PROCESS_ID``, when ``RANK`` is already set (a
    local job) or when the variables are malformed (:func:`init` reports that).
    """
    if ENV_PROCESS_ID not in environ or "RANK" in environ:
        return
    try:
        _, num, pid = cluster(environ)
    except JaxSetupError:
        return
    one_process_per_node(environ, pid, num)


def import_jax() -> Any:
    """The ``jax`` module; :class:`JaxSetupError` naming the fix when it is missing."""
    try:
        import jax
    except ImportError as exc:
        raise JaxSetupError(
            f"JAX is not installed in this worker ({exc}); install it with "
            "pip install 'jupyter_disttrain[jax]', or use an image with JAX "
            "(--image with the notebook's Python and jax)"
        ) from None
    return jax


def _loopback_collectives(host: str) -> None:
    """Make the CPU backend's gloo collectives listen and connect on ``host`` (loopback)."""
    from jax._src import distributed, xla_bridge
    from jax._src.lib import _jax  # type: ignore[attr-defined]

    def make_cpu_client() -> Any:
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=distributed.global_state.client, hostname=host
        )
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", make_cpu_client, priority=0, fail_quietly=False)


def init() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Join the job's JAX processes; return ``(backend, names for the cell, hello fields)``.

    Blocks until every process reached the coordinator (its registration is
    a barrier). The backend is ``jax-gloo`` on CPU, ``jax-<platform>`` else.
    """
    address, num, pid = cluster(os.environ)
    jax = import_jax()
    if num > 1:
        host, _, _ = address.rpartition(":")
        kwargs: dict[str, Any] = {}
        if host in LOOPBACK_HOSTS:
            kwargs["coordinator_bind_address"] = address
            if "cpu" in os.environ.get("JAX_PLATFORMS", "cpu"):
                _loopback_collectives(host)
        timeout = int(float(os.environ.get("DISTRAIN_PG_TIMEOUT", str(INIT_TIMEOUT))))
        jax.distributed.initialize(
            coordinator_address=address,
            num_processes=num,
            process_id=pid,
            initialization_timeout=min(timeout, INIT_TIMEOUT),
            **kwargs,
        )
        client = _client()
        if client is not None:
            jobstore.use_store(CoordinationStore(client))
    platform = jax.devices()[0].platform
    backend = "jax-gloo" if platform == "cpu" else f"jax-{platform}"
    return backend, {}, {"task": f"process:{pid}"}


def init_worker(payload: dict[str, Any], rank: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The framework set-up the worker calls (see ``runtime/worker.py``): :func:`init`."""
    return init()


def _client() -> Any:
    from jax._src import distributed

    return distributed.global_state.client


def result(value: Any) -> Any:
    """``value`` with every JAX array replaced by a numpy array (what the notebook gets).

    An array this process holds whole (or a replicated one) is copied to the
    host; one sharded over other processes cannot be read by rank 0 alone and
    raises :class:`ValueError` naming the fix.
    """
    import sys

    jax = sys.modules.get("jax")
    if jax is None:
        return value
    import numpy as np

    def host(leaf: Any) -> Any:
        if not isinstance(leaf, jax.Array):
            return leaf
        if leaf.is_fully_addressable:
            return np.asarray(leaf)
        if leaf.is_fully_replicated:
            return np.asarray(leaf.addressable_data(0))
        raise ValueError(
            f"the cell's value holds an array of shape {leaf.shape} sharded over several "
            "processes, which process 0 cannot read alone; end the cell with "
            "jax.experimental.multihost_utils.process_allgather(x) (run on every process)"
        )

    return jax.tree_util.tree_map(host, value)


class CoordinationStore:
    """JAX's coordination-service key-value store with the c10d store methods the runtime uses.

    ``set``/``get`` (blocking)/``check``/``add``/``delete_key``, as
    :class:`~.jobstore.SignedStore` calls them; values are bytes. Every name
    gets ``prefix`` in front (:meth:`scoped`, as a c10d ``PrefixStore``). The
    client is thread-safe: threads share it, a blocking read holds no lock.
    """

    def __init__(self, client: Any, prefix: str = "") -> None:
        self.client = client
        self.prefix = prefix

    def scoped(self, prefix: str) -> CoordinationStore:
        """The same store with ``prefix`` added in front of every name."""
        return CoordinationStore(self.client, self.prefix + prefix)

    def set(self, name: str, value: bytes | str) -> None:
        """Set ``name`` (overwriting)."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        self.client.key_value_set_bytes(self.prefix + name, data, allow_overwrite=True)

    def get(self, name: str) -> bytes:
        """The value of ``name``, waiting until it is set."""
        while True:
            try:
                found = self.client.blocking_key_value_get_bytes(self.prefix + name, GET_ROUND_MS)
                return bytes(found)
            except Exception as exc:
                if "DEADLINE" not in str(exc).upper():
                    raise

    def _get_now(self, name: str) -> bytes | None:
        try:
            return bytes(self.client.key_value_try_get_bytes(self.prefix + name))
        except Exception as exc:
            if "NOT_FOUND" in str(exc).upper() or "NOT FOUND" in str(exc).upper():
                return None
            raise

    def check(self, names: list[str]) -> bool:
        """Whether every name is set."""
        return all(self._get_now(name) is not None for name in names)

    def multi_get(self, names: list[str]) -> list[bytes]:
        """The values of ``names``, which are all set (c10d's ``multi_get``; the hang watch
        gathers the ranks' stacks with it)."""
        return [self.get(name) for name in names]

    def add(self, name: str, amount: int) -> int:
        """The counter ``name`` after adding ``amount`` (atomic in the coordination service)."""
        return int(self.client.key_value_increment(self.prefix + name, int(amount)))

    def delete_key(self, name: str) -> bool:
        """Delete ``name``."""
        self.client.key_value_delete(self.prefix + name)
        return True
