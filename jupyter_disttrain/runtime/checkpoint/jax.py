"""JAX checkpoints in the checkpoint directory format (see :mod:`.format`).

``save_checkpoint(state, step)`` with a pytree holding JAX arrays (params,
optimizer state, a dict of them) must run on every process. The folder
``step-...-ID.jax`` is written in a temporary directory, then committed like
a sharded checkpoint (per-file digests, rename, record) by process 0, and
every process returns once it is committed (a barrier over JAX's
coordination service). What the folder holds:

- with orbax (``orbax-checkpoint`` installed, a local or mounted directory):
  ``state/``, written by every process with orbax's ``StandardCheckpointer``
  (each its own shards), so nothing is gathered on one process;
- otherwise ``arrays.npz`` (every leaf as a numpy array, no pickles; an array
  sharded over processes is gathered first, a collective) and ``tree.json``
  (the tree's dicts, lists and tuples, so it loads without the code that
  made it), written by process 0.

``load_checkpoint()`` returns the tree of numpy arrays on every process;
``load_checkpoint(into=tree)`` gives the saved arrays the structure and, for
JAX array leaves, the sharding of ``tree`` (a template such as freshly
initialised params, on any number of processes).

Used only when JAX is already imported; nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import sys
from typing import Any

from . import format as fmt
from .directory import CheckpointDir
from .format import CheckpointError

ARRAYS, TREE = "arrays.npz", "tree.json"
#: The folder orbax writes inside a checkpoint.
ORBAX_STATE = "state"
#: Milliseconds every process waits for the others at the end of a save.
BARRIER_MS = 600_000
#: Saves this process made (every process saves in the same order): names barriers and keys.
_saves = [0]


def orbax() -> Any:
    """``orbax.checkpoint``, or None when it is not installed."""
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        return None
    return ocp


def is_jax(state: Any) -> bool:
    """True for a pytree with at least one JAX array leaf."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    return any(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(state))


def _host(jax: Any, leaf: Any) -> Any:
    """A leaf as a numpy array (a collective for arrays sharded over processes)."""
    import numpy as np

    if not isinstance(leaf, jax.Array):
        return np.asarray(leaf)
    if leaf.is_fully_addressable:
        return np.asarray(leaf)
    if leaf.is_fully_replicated:
        return np.asarray(leaf.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))


def structure(tree: Any, counter: list[int]) -> Any:
    """``tree`` as JSON: dicts (string keys), lists and tuples kept, each leaf its index in
    JAX's flattening order (dict keys sorted)."""
    if isinstance(tree, dict):
        if not all(isinstance(k, str) for k in tree):
            raise CheckpointError("save_checkpoint(): a JAX tree's dict keys must be strings")
        return {"dict": {k: structure(tree[k], counter) for k in sorted(tree)}}
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        container = "list" if isinstance(tree, list) else "tuple"
        return {container: [structure(v, counter) for v in tree]}
    if tree is None:
        return {"none": True}
    counter[0] += 1
    return {"leaf": counter[0] - 1}


def rebuild(node: Any, leaves: list[Any]) -> Any:
    """The tree :func:`structure` described, with ``leaves`` in its places."""
    if "dict" in node:
        return {k: rebuild(v, leaves) for k, v in node["dict"].items()}
    if "list" in node:
        return [rebuild(v, leaves) for v in node["list"]]
    if "tuple" in node:
        return tuple(rebuild(v, leaves) for v in node["tuple"])
    if "none" in node:
        return None
    return leaves[int(node["leaf"])]


def _barrier(name: str) -> None:
    """Every process of the job gets here (JAX's coordination service; nothing alone)."""
    from jax._src import distributed

    client = distributed.global_state.client
    if client is not None:
        client.wait_at_barrier(f"distrain-ckpt-{name}", BARRIER_MS)


def save(
    cdir: CheckpointDir,
    state: Any,
    step: int,
    metrics: dict[str, float],
    keep_last: int | None,
    keep_best: str | None,
) -> str | None:
    """Write ``state`` as checkpoint ``step`` (on every process); process 0 returns its URI."""
    import numpy as np

    from . import commit as ck

    jax = sys.modules["jax"]
    _saves[0] += 1
    ocp = orbax() if cdir.local else None
    if ocp is not None:
        return _save_orbax(ocp, cdir, state, step, metrics, keep_last, keep_best)
    leaves = jax.tree_util.tree_leaves(state)
    tree = structure(state, [0]) if _plain(state, jax) else None
    arrays = [_host(jax, leaf) for leaf in leaves]  # every process: gathers are collectives
    if ck.env_rank() != 0:
        _barrier(f"{_saves[0]}")
        return None
    ck.prepare_dir(cdir)
    token = secrets.token_hex(3)
    name = fmt.payload_name(step, token, fmt.JAX)
    buffer = io.BytesIO()
    np.savez(buffer, **{f"a{i}": a for i, a in enumerate(arrays)})
    blobs = {
        ARRAYS: buffer.getvalue(),
        TREE: json.dumps({"tree": tree, "leaves": len(arrays)}).encode(),
    }
    tmp = cdir.fs.temp_dir(cdir.root, name)
    try:
        for fname, data in blobs.items():
            cdir.fs.write_bytes(cdir.fs.join(tmp, fname), data, ck.fsync_enabled())
        cdir.fs.commit_dir(tmp, cdir.fs.join(cdir.root, name), fsync=ck.fsync_enabled())
    except BaseException:
        cdir.fs.remove(tmp)
        raise
    files = {n: (len(d), hashlib.sha256(d).hexdigest()) for n, d in blobs.items()}
    entry = ck.folder_entry(
        step=step,
        token=token,
        layout=fmt.JAX,
        files=files,
        metrics=metrics,
        tensors=len(arrays),
        parameters=sum(int(a.size) for a in arrays),
        packages=("jax",),
    )
    uri = ck.finish_commit(cdir, entry, keep_last, keep_best)
    _barrier(f"{_saves[0]}")
    return uri


def _save_orbax(
    ocp: Any,
    cdir: CheckpointDir,
    state: Any,
    step: int,
    metrics: dict[str, float],
    keep_last: int | None,
    keep_best: str | None,
) -> str | None:
    """Every process writes its shards with orbax into process 0's temporary folder."""
    from ..jobstore import signed_default_store
    from . import commit as ck

    jax = sys.modules["jax"]
    rank, store = ck.env_rank(), signed_default_store()
    key = f"distrain/checkpoint/{_saves[0]}"
    if rank == 0:
        ck.prepare_dir(cdir)
        token = secrets.token_hex(3)
        name = fmt.payload_name(step, token, fmt.JAX)
        tmp = cdir.fs.temp_dir(cdir.root, name)
        if store is not None:  # signed with the job key: nobody else names the folder
            store.set(key, json.dumps([tmp, name, token]))
    elif store is None:
        raise CheckpointError("a JAX checkpoint of several processes needs the job's store")
    else:
        tmp, name, token = json.loads(store.wait(key))
    checkpointer = ocp.StandardCheckpointer()
    try:
        checkpointer.save(os.path.join(tmp, ORBAX_STATE), state)
        checkpointer.wait_until_finished()
        _barrier(f"{_saves[0]}-written")
        if rank != 0:
            _barrier(f"{_saves[0]}")
            return None
        files = _digests(tmp)
        cdir.fs.commit_dir(tmp, cdir.fs.join(cdir.root, name), fsync=ck.fsync_enabled())
    except BaseException:
        if rank == 0:
            cdir.fs.remove(tmp)
        raise
    leaves = jax.tree_util.tree_leaves(state)
    entry = ck.folder_entry(
        step=step,
        token=token,
        layout=fmt.JAX,
        files=files,
        metrics=metrics,
        tensors=len(leaves),
        parameters=sum(int(getattr(x, "size", 1)) for x in leaves),
        packages=("jax",),
    )
    uri = ck.finish_commit(cdir, entry, keep_last, keep_best)
    _barrier(f"{_saves[0]}")
    return uri


def _digests(folder: str) -> dict[str, tuple[int, str]]:
    """Size and sha256 of every file under ``folder``, by its relative path."""
    out = {}
    for root, _, names in os.walk(folder):
        for fname in sorted(names):
            path = os.path.join(root, fname)
            with open(path, "rb") as fh:
                data = fh.read()
            out[os.path.relpath(path, folder).replace(os.sep, "/")] = (
                len(data),
                hashlib.sha256(data).hexdigest(),
            )
    return out


def _plain(state: Any, jax: Any) -> bool:
    """True when ``state``'s containers are all dicts, lists, tuples (rebuildable from JSON)."""
    counter = [0]
    try:
        structure(state, counter)
    except CheckpointError:
        return False
    return counter[0] == len(jax.tree_util.tree_leaves(state))


def _checked(cdir: CheckpointDir, entry: fmt.Entry) -> str:
    """The checkpoint's folder once every file's digest matched."""
    status, reason = cdir.verify(entry)
    if status != fmt.OK:
        raise fmt.CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
    return cdir.payload_path(entry)


def is_orbax(entry: fmt.Entry) -> bool:
    """True for a checkpoint orbax wrote (see the module docstring)."""
    return ARRAYS not in dict(entry.get("files") or {})


def _need_orbax(entry: fmt.Entry) -> Any:
    ocp = orbax()
    if ocp is None:
        raise CheckpointError(
            f"checkpoint step {entry['step']} was written by orbax: install orbax-checkpoint "
            "(pip install orbax-checkpoint) where it is loaded"
        )
    return ocp


def _orbax_numpy(ocp: Any, path: str) -> Any:
    """Every array of an orbax checkpoint as numpy, in its saved tree (no devices needed)."""
    import jax  # orbax imports it anyway
    import numpy as np

    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(path).item_metadata.tree
    args = jax.tree_util.tree_map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    return checkpointer.restore(path, restore_args=args)


def read(cdir: CheckpointDir, entry: fmt.Entry) -> tuple[Any, list[Any]]:
    """``(tree description or None, leaves as numpy arrays)`` of an ``.npz`` checkpoint."""
    import numpy as np

    root = _checked(cdir, entry)
    meta = json.loads(cdir.fs.read_bytes(cdir.fs.join(root, TREE)) or b"{}")
    data = cdir.fs.read_bytes(cdir.fs.join(root, ARRAYS)) or b""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        leaves = [npz[f"a{i}"] for i in range(int(meta.get("leaves", 0)))]
    return meta.get("tree"), leaves


def load(cdir: CheckpointDir, entry: fmt.Entry, into: Any) -> Any:
    """Checkpoint ``entry`` as a tree of numpy arrays, or in the structure of ``into``."""
    if is_orbax(entry):
        ocp = _need_orbax(entry)
        path = os.path.join(_checked(cdir, entry), ORBAX_STATE)
        if into is None:
            return _orbax_numpy(ocp, path)
        target = sys.modules["jax"].tree_util.tree_map(ocp.utils.to_shape_dtype_struct, into)
        return ocp.StandardCheckpointer().restore(path, target)
    tree, leaves = read(cdir, entry)
    if into is None:
        if tree is None:
            raise CheckpointError(
                f"checkpoint step {entry['step']} holds a JAX tree of custom nodes: load it "
                "with load_checkpoint(into=template), a tree of the same structure"
            )
        return rebuild(tree, leaves)
    jax = sys.modules.get("jax")
    if jax is None:
        raise CheckpointError("load_checkpoint(into=...) of a JAX checkpoint needs jax imported")
    want, treedef = jax.tree_util.tree_flatten(into)
    if len(want) != len(leaves):
        raise CheckpointError(
            f"checkpoint step {entry['step']} has {len(leaves)} arrays but into= has "
            f"{len(want)}: load it into a tree of the structure it was saved from"
        )
    placed = []
    for i, (saved, like) in enumerate(zip(leaves, want, strict=True)):
        shape = tuple(getattr(like, "shape", saved.shape))
        if tuple(saved.shape) != shape:
            raise CheckpointError(
                f"checkpoint step {entry['step']}: array {i} has shape {tuple(saved.shape)}, "
                f"into= has {shape}"
            )
        if isinstance(like, jax.Array):
            placed.append(
                jax.make_array_from_callback(shape, like.sharding, lambda index, a=saved: a[index])
            )
        else:
            placed.append(saved)
    return jax.tree_util.tree_unflatten(treedef, placed)


def variables(cdir: CheckpointDir, entry: fmt.Entry) -> Any:
    """The saved tree of numpy arrays (``{"a0": ...}`` by position for custom nodes); for the
    notebook, which needs no JAX to read an ``.npz`` one)."""
    if is_orbax(entry):
        return _orbax_numpy(_need_orbax(entry), os.path.join(_checked(cdir, entry), ORBAX_STATE))
    tree, leaves = read(cdir, entry)
    return (
        {f"a{i}": leaf for i, leaf in enumerate(leaves)} if tree is None else rebuild(tree, leaves)
    )
