"""JAX checkpoints in the checkpoint directory format (see :mod:`.format`).

``save_checkpoint(state, step)`` with a pytree holding JAX arrays (params,
optimizer state, a dict of them) must run on every process: an array
sharded over several processes is gathered with a collective
(``multihost_utils.process_allgather``). Process 0 then writes the folder
``step-...-ID.jax`` holding ``arrays.npz`` (every leaf as a numpy array,
no pickles) and ``tree.json`` (the tree's dicts, lists and tuples, so it
loads without the code that made it), commits it like a sharded
checkpoint (per-file digests, rename, record) and every process returns
once it is committed (a barrier over JAX's coordination service).

``load_checkpoint()`` returns the same tree of numpy arrays on every
process; ``load_checkpoint(into=tree)`` gives the saved arrays the structure,
and, for JAX array leaves, the sharding of ``tree`` (a template such as
freshly initialised params, on any number of processes).

Used only when JAX is already imported; nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import sys
import time
from typing import Any

from . import format as fmt
from .directory import CheckpointDir
from .format import CheckpointError

ARRAYS, TREE = "arrays.npz", "tree.json"
#: Milliseconds every process waits for the others at the end of a save.
BARRIER_MS = 600_000


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
        kind = "list" if isinstance(tree, list) else "tuple"
        return {kind: [structure(v, counter) for v in tree]}
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
    leaves = jax.tree_util.tree_leaves(state)
    tree = structure(state, [0]) if _plain(state, jax) else None
    arrays = [_host(jax, leaf) for leaf in leaves]  # every process: gathers are collectives
    if ck.env_rank() != 0:
        _barrier(f"{step}")
        return None
    ck.prepare_dir(cdir)
    token = secrets.token_hex(3)
    name = fmt.payload_name(step, token, fmt.JAX)
    buffer = io.BytesIO()
    np.savez(buffer, **{f"a{i}": a for i, a in enumerate(arrays)})
    blobs = {ARRAYS: buffer.getvalue(),
             TREE: json.dumps({"tree": tree, "leaves": len(arrays)}).encode()}  # fmt: skip
    tmp = cdir.fs.temp_dir(cdir.root, name)
    try:
        for fname, data in blobs.items():
            cdir.fs.write_bytes(cdir.fs.join(tmp, fname), data, ck.fsync_enabled())
        cdir.fs.commit_dir(tmp, cdir.fs.join(cdir.root, name), fsync=ck.fsync_enabled())
    except BaseException:
        cdir.fs.remove(tmp)
        raise
    files = {n: (len(d), hashlib.sha256(d).hexdigest()) for n, d in blobs.items()}
    combined = hashlib.sha256("".join(f"{n}:{h}\n" for n, (_, h) in sorted(files.items())).encode())
    entry = fmt.make_entry(
        step=step, token=token, kind=fmt.JAX, time=time.time(),
        nbytes=sum(n for n, _ in files.values()), sha256=combined.hexdigest(), metrics=metrics,
        world_size=ck.env_world_size(), versions=ck.library_versions(), files=files,
        job=ck.env_text("DISTRAIN_JOB_ID"), run=ck.env_text("DISTRAIN_RUN_ID"),
        tensors=len(arrays), parameters=sum(int(a.size) for a in arrays),
    )  # fmt: skip
    uri = ck.finish_commit(cdir, entry, keep_last, keep_best)
    _barrier(f"{step}")
    return uri


def _plain(state: Any, jax: Any) -> bool:
    """True when ``state``'s containers are all dicts, lists, tuples (rebuildable from JSON)."""
    counter = [0]
    try:
        structure(state, counter)
    except CheckpointError:
        return False
    return counter[0] == len(jax.tree_util.tree_leaves(state))


def read(cdir: CheckpointDir, entry: fmt.Entry) -> tuple[Any, list[Any]]:
    """``(tree description or None, leaves as numpy arrays)`` of checkpoint ``entry``, checked."""
    import numpy as np

    status, reason = cdir.verify(entry)
    if status != fmt.OK:
        raise fmt.CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
    root = cdir.payload_path(entry)
    meta = json.loads(cdir.fs.read_bytes(cdir.fs.join(root, TREE)) or b"{}")
    data = cdir.fs.read_bytes(cdir.fs.join(root, ARRAYS)) or b""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        leaves = [npz[f"a{i}"] for i in range(int(meta.get("leaves", 0)))]
    return meta.get("tree"), leaves


def load(cdir: CheckpointDir, entry: fmt.Entry, into: Any) -> Any:
    """Checkpoint ``entry`` as a tree of numpy arrays, or in the structure of ``into``."""
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
            placed.append(jax.make_array_from_callback(
                shape, like.sharding, lambda index, a=saved: a[index]))  # fmt: skip
        else:
            placed.append(saved)
    return jax.tree_util.tree_unflatten(treedef, placed)


def variables(cdir: CheckpointDir, entry: fmt.Entry) -> Any:
    """The saved tree of numpy arrays (``{"a0": ...}`` by position for custom nodes); for the
    notebook, which needs no JAX to read it."""
    tree, leaves = read(cdir, entry)
    return {f"a{i}": leaf for i, leaf in enumerate(leaves)} if tree is None else rebuild(
        tree, leaves)  # fmt: skip
