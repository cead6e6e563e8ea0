"""``CheckpointStore``: the checkpoints of a directory, seen from the notebook.

A store lists what the workers saved (``list()`` reads the directory's
manifest, not the checkpoints), shows what one holds (``describe``), loads
one into the notebook (``load``), and deletes or prunes. A checkpoint whose
file is missing or whose checksum does not match is reported as
``incomplete`` or ``corrupt`` and never loaded. The format and the I/O are
the workers' own (:mod:`..runtime.checkpoint.format`, :mod:`..runtime.checkpoint.directory`), so
both sides always agree. Paths use the standard library, URLs fsspec.
"""

from __future__ import annotations

import builtins
import datetime
import io
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..runtime.checkpoint import format as fmt
from ..runtime.checkpoint import tf as checkpoint_tf
from ..runtime.checkpoint.api import load_sharded
from ..runtime.checkpoint.directory import CheckpointDir
from ..runtime.checkpoint.format import CheckpointError, CorruptCheckpoint
from ..units import format_bytes

__all__ = [
    "CheckpointDetails",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "CorruptCheckpoint",
    "TensorInfo",
    "format_table",
]

Step = int | str


@dataclass(frozen=True)
class CheckpointInfo:
    """One listed checkpoint. ``status``: ``ok``, ``incomplete`` or ``corrupt`` (``reason``);
    ``layout``: how its data is stored (``full``, ``sharded``, ``tf``, ``jax``, ``hf``, ...)."""

    step: int
    time: float
    bytes: int
    metrics: dict[str, float]
    world_size: int
    status: str
    reason: str
    uri: str
    layout: str
    sha256: str
    versions: dict[str, str]
    job: str
    tensors: int | None
    parameters: int | None
    record: dict[str, Any] = field(repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the checkpoint is complete (as far as checked)."""
        return self.status == fmt.OK

    @property
    def kind(self) -> str:
        """The former name of :attr:`layout` (read-only)."""
        return self.layout

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> CheckpointInfo:
        """Build from a record of :mod:`..runtime.checkpoint.format`."""
        return cls(
            step=int(entry["step"]),
            time=float(entry.get("time", 0.0)),
            bytes=int(entry.get("bytes", 0)),
            metrics=entry.get("metrics") or {},
            world_size=int(entry.get("world_size", 0)),
            status=str(entry.get("status", fmt.OK)),
            reason=str(entry.get("reason", "")),
            uri=str(entry.get("uri", "")),
            layout=fmt.layout_of(entry) or fmt.FULL,
            sha256=str(entry.get("sha256", "")),
            versions=entry.get("versions") or {},
            job=str(entry.get("job", "")),
            tensors=entry.get("tensors"),
            parameters=entry.get("parameters"),
            record=entry,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class TensorInfo:
    """A tensor inside a checkpoint: dotted name, shape, dtype, number of elements."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    numel: int


@dataclass(frozen=True)
class CheckpointDetails:
    """What a checkpoint holds: top-level keys, every tensor, and other values by name."""

    step: int
    keys: list[str]
    tensors: list[TensorInfo]
    others: dict[str, str]

    @property
    def parameters(self) -> int:
        """Total elements over all tensors (model and optimizer state alike)."""
        return sum(t.numel for t in self.tensors)

    def by_key(self) -> dict[str, int]:
        """Total elements per top-level key (``model``, ``optimizer`` ...)."""
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.name.split(".", 1)[0]] = out.get(t.name.split(".", 1)[0], 0) + t.numel
        return out


class CheckpointStore:
    """The checkpoints under ``uri`` (a local path or any fsspec URL).

    ``storage_options`` go to fsspec (e.g. ``{"endpoint_url": ...}`` for an
    S3-compatible server). Steps are ints; ``"latest"`` means the newest
    complete checkpoint.
    """

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self.dir = CheckpointDir(str(uri), storage_options)
        self.uri = self.dir.uri
        self._checked: dict[str, tuple[str, str]] = {}

    # -- listing -------------------------------------------------------------
    def _entries(self) -> list[fmt.Entry]:
        entries = self.dir.entries(compact=False)
        for entry in entries:
            known = self._checked.get(self._key(entry))
            if known is not None and entry["status"] == fmt.OK:
                entry["status"], entry["reason"] = known
        return entries

    @staticmethod
    def _key(entry: Mapping[str, Any]) -> str:
        return f"{entry['step']}-{entry.get('id')}"

    def list(self) -> list[CheckpointInfo]:
        """Every checkpoint, by step (fast: the manifest, one listing; no data read)."""
        return [CheckpointInfo.from_entry(e) for e in self._entries()]

    def steps(self) -> builtins.list[int]:
        """The listed steps."""
        return [c.step for c in self.list()]

    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint, if any."""
        good = [c for c in self.list() if c.ok]
        return good[-1] if good else None

    def best(self, metric: str = "loss", mode: str = "min") -> CheckpointInfo | None:
        """The complete checkpoint with the lowest (``mode="max"``: highest) ``metric``."""
        entries = [e for e in self._entries() if e["status"] == fmt.OK]
        found = fmt.best_entry(entries, f"{metric}:{mode}")
        return None if found is None else CheckpointInfo.from_entry(found)

    def _entry(self, step: Step) -> fmt.Entry:
        which = fmt.parse_which(step)
        entries = self._entries()
        if which == "latest":
            good = [e for e in entries if e["status"] == fmt.OK]
            if not good:
                raise CheckpointError(f"no complete checkpoint in {self.uri}")
            return good[-1]
        found = fmt.select(entries, which)
        if found is None:
            steps = ", ".join(str(e["step"]) for e in entries[-10:]) or "none"
            raise CheckpointError(f"no checkpoint {step!r} in {self.uri} (last steps: {steps})")
        return found

    def info(self, step: Step = "latest", *, verify: bool = False) -> CheckpointInfo:
        """One checkpoint's record; with ``verify``, after checking its data's checksum."""
        entry = self._entry(step)
        if verify:
            entry["status"], entry["reason"] = self._verify(entry)
        return CheckpointInfo.from_entry(entry)

    def verify(self) -> dict[int, str]:
        """Check every checkpoint's data (reads it all): step -> status."""
        out = {}
        for entry in self._entries():
            out[int(entry["step"])] = self._verify(entry)[0]
        return out

    def _verify(self, entry: fmt.Entry) -> tuple[str, str]:
        if entry.get("status") not in (fmt.OK, None):
            return str(entry["status"]), str(entry.get("reason", ""))
        result = self.dir.verify(entry)
        self._checked[self._key(entry)] = result
        return result

    # -- contents ------------------------------------------------------------
    def load(
        self, step: Step = "latest", weights_only: bool = True, map_location: Any = "cpu"
    ) -> Any:
        """The saved state of ``step``; raise :class:`CorruptCheckpoint` if it is damaged.

        ``weights_only=True`` (torch's safe loader) reads tensors and plain
        containers; pass ``False`` for other pickled objects from a source
        you trust. With ``"latest"``, a damaged newest checkpoint is skipped
        for the one before it, with a warning.
        """
        entry = self._entry(step)
        while True:
            try:
                return self._load_entry(entry, weights_only, map_location)
            except CorruptCheckpoint as exc:
                if fmt.parse_which(step) != "latest":
                    raise
                older = [
                    e
                    for e in self._entries()
                    if e["status"] == fmt.OK and e["step"] < entry["step"]
                ]
                if not older:
                    raise
                warnings.warn(f"skipping damaged checkpoint: {exc}", RuntimeWarning, stacklevel=2)
                entry = older[-1]

    def _load_entry(self, entry: fmt.Entry, weights_only: bool, map_location: Any) -> Any:
        hint = fmt.not_torch_state(entry, self.dir.payload_uri(entry))
        if hint is not None:
            raise CheckpointError(hint)
        layout = fmt.layout_of(entry)
        own = fmt.format_of(layout)
        if own is not None and own.reader:  # e.g. TensorFlow's variables as numpy arrays
            return fmt.function_of(own.reader)(self.dir, entry)
        import torch

        if entry.get("status") not in (fmt.OK, None):
            raise CorruptCheckpoint(
                f"checkpoint step {entry['step']} is {entry['status']}: {entry.get('reason')}"
            )
        if layout == fmt.SHARDED:
            status, reason = self._verify(entry)
            if status != fmt.OK:
                raise CorruptCheckpoint(f"checkpoint step {entry['step']} is {status}: {reason}")
            return load_sharded(self.dir, entry)
        try:
            data = self.dir.read_verified(entry)
        except CorruptCheckpoint as exc:
            self._checked[self._key(entry)] = (fmt.CORRUPT, str(exc))
            raise
        self._checked[self._key(entry)] = (fmt.OK, "")
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)

    def describe(self, step: Step = "latest") -> CheckpointDetails:
        """Keys, tensor shapes and dtypes of a checkpoint (sharded: from its metadata only)."""
        entry = self._entry(step)
        layout = fmt.layout_of(entry)
        if layout == fmt.SHARDED:
            return self._describe_sharded(entry)
        if layout == fmt.TF:
            saved = checkpoint_tf.describe(self.dir, entry)
            found = [TensorInfo(key, shape, dtype, _numel(shape)) for key, shape, dtype in saved]
            keys = list(dict.fromkeys(t.name.split("/", 1)[0] for t in found))
            return CheckpointDetails(int(entry["step"]), keys, found, {})
        state = self._load_entry(entry, True, "cpu")
        tensors: list[TensorInfo] = []
        others: dict[str, str] = {}
        _walk(state, "", tensors, others)
        keys = [str(k) for k in state] if isinstance(state, Mapping) else []
        return CheckpointDetails(int(entry["step"]), keys, tensors, others)

    def _describe_sharded(self, entry: fmt.Entry) -> CheckpointDetails:
        from torch.distributed.checkpoint.filesystem import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        if not self.dir.local:
            state = self.load(int(entry["step"]))
            tensors: list[TensorInfo] = []
            others: dict[str, str] = {}
            _walk(state, "", tensors, others)
            return CheckpointDetails(int(entry["step"]), list(state), tensors, others)
        meta = FileSystemReader(self.dir.payload_path(entry)).read_metadata()
        tensors, others = [], {}
        keys: dict[str, None] = {}
        for name, item in meta.state_dict_metadata.items():
            keys[name.split(".", 1)[0]] = None
            if isinstance(item, TensorStorageMetadata):
                shape = tuple(int(d) for d in item.size)
                dtype = str(item.properties.dtype).replace("torch.", "")
                tensors.append(TensorInfo(name, shape, dtype, _numel(shape)))
            else:
                others[name] = "object"
        return CheckpointDetails(int(entry["step"]), list(keys), tensors, others)

    # -- removing ------------------------------------------------------------
    def delete(self, step: int) -> CheckpointInfo:
        """Delete one checkpoint (its record first, so it is never listed half-deleted)."""
        entry = self._entry(fmt.check_step(step))
        self.dir.remove([entry])
        return CheckpointInfo.from_entry(entry)

    def prune(self, keep_last: int, keep_best: str | None = None) -> builtins.list[CheckpointInfo]:
        """Keep the last ``keep_last`` steps (and the best by ``keep_best``); delete the rest.

        Also removes temporary files that crashed writers left over an hour ago.
        """
        removed = self.dir.prune(keep_last, keep_best)
        self.dir.sweep()
        return [CheckpointInfo.from_entry(e) for e in removed]

    def __repr__(self) -> str:
        return f"CheckpointStore({self.uri!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"{self!r}\n{format_table(self.list())}")


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for dim in shape:
        out *= dim
    return out


def _walk(obj: Any, prefix: str, tensors: list[TensorInfo], others: dict[str, str]) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        shape = tuple(int(d) for d in obj.shape)
        tensors.append(TensorInfo(prefix, shape, str(obj.dtype).replace("torch.", ""), obj.numel()))
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            _walk(value, f"{prefix}.{key}" if prefix else str(key), tensors, others)
    elif isinstance(obj, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in obj):
        for i, value in enumerate(obj):
            _walk(value, f"{prefix}.{i}" if prefix else str(i), tensors, others)
    else:
        text = repr(obj)
        others[prefix] = text if len(text) <= 60 else text[:57] + "..."


# -- text ---------------------------------------------------------------------


def format_time(stamp: float) -> str:
    """A checkpoint time as local ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def format_metrics(metrics: Mapping[str, float]) -> str:
    """``loss=0.123 acc=0.9``."""
    return " ".join(f"{k}={v:.4g}" for k, v in metrics.items())


def format_table(infos: list[CheckpointInfo]) -> str:
    """A plain-text table of checkpoints (the text fallback of the browser)."""
    if not infos:
        return "no checkpoints"
    rows = [("step", "time", "size", "world", "status", "metrics")]
    for c in infos:
        status = c.status if c.ok else f"{c.status}: {c.reason}"
        rows.append(
            (
                str(c.step),
                format_time(c.time),
                format_bytes(c.bytes),
                str(c.world_size),
                status,
                format_metrics(c.metrics),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in (0, 2, 3) else c.ljust(w)
            for i, (c, w) in enumerate(zip(row[:5], widths, strict=True))
        ]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    return "\n".join(lines)


def reported_dir(uris: list[str]) -> str | None:
    """The directory of the last checkpoint a job reported, if the URIs name one."""
    if uris and "/" in uris[-1]:
        return uris[-1].rstrip("/").rsplit("/", 1)[0]
    return None
