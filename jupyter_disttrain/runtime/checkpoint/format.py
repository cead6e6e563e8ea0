"""The checkpoint directory format: pure functions shared by the workers and the notebook.

A checkpoint directory ``ROOT`` holds::

    step-000000040-1a2b3c.pt          a full bundle (torch.save of the state)
    step-000000050-4d5e6f.dcp/        a sharded checkpoint (torch.distributed.checkpoint)
    step-000000060-7a8b9c.tf/         a TensorFlow checkpoint (tf.train.Checkpoint files)
    step-000000070-1f2e3d.hf/         a Hugging Face Trainer's checkpoint-N folder (a copy)
    step-000000080-4c5b6a.ckpt        a Lightning checkpoint file (a copy)
    step-000000090-7d8e9f.keras       a Keras checkpoint: a .keras or .weights.h5 file (a copy)
    .tmp-...                          files being written (never listed)
    .distrain/entries/000000000040-1a2b3c.json   one record per committed checkpoint
    .distrain/manifest.json           compacted copy of the records (a cache)

A record (:func:`make_entry`) is one JSON object: ``format`` (the record's
version, :data:`FORMAT`), ``step``, ``id``, ``layout`` (how the data is
stored: a registered :class:`CheckpointFormat`'s name such as ``full``,
``sharded``, ``tf``), ``path``, ``time``, ``bytes``, ``sha256``, ``metrics``,
``world_size``, ``versions``, ``job``, ``run``; for folders ``files``
(size and sha256 by relative path), ``tensors`` and ``parameters`` when
counted, ``source`` for a library's checkpoint. Records of format 1 name the
layout ``kind`` only: :func:`layout_of` reads either, so they list, load and
resume as before; a record of format 2 repeats its layout as ``kind`` for the
readers of format 1 (an earlier version listing the same directory).

A checkpoint exists once its record exists: the payload is written (to a
temporary name, flushed, fsynced and renamed, or as one object on an object
store) before its record is written, atomically, under a name of its own.
Writers never rewrite each other's records, so concurrent writers cannot
lose one. ``manifest.json`` is only a cache that makes listing cheap: a
reader takes it, lists ``entries/`` and reads the records it lacks, and
drops what it has that ``entries/`` no longer holds (deleted checkpoints).
A crash at any point leaves either no record (the checkpoint never existed)
or a complete one. Standard library only; no I/O here.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

#: The record's version: 2 names the data's layout ``layout`` (1 named it ``kind``).
FORMAT = 2
#: The record's key of the data's layout, and the key records of format 1 used.
LAYOUT_KEY, FORMER_LAYOUT_KEY = "layout", "kind"
META_DIR = ".distrain"
ENTRIES_DIR = f"{META_DIR}/entries"
MANIFEST = f"{META_DIR}/manifest.json"
TMP_PREFIX = ".tmp-"
FULL, SHARDED, TF = "full", "sharded", "tf"
#: A JAX pytree: a folder with its arrays (``.npz``) and its structure (JSON), see ``jax.py``.
JAX = "jax"
#: A training library's own checkpoint, copied in once the library finished writing it.
HF, LIGHTNING, KERAS = "hf", "lightning", "keras"
#: Statuses: complete; a file is missing; size or checksum wrong, or record unreadable.
OK, INCOMPLETE, CORRUPT = "ok", "incomplete", "corrupt"

ENTRY_RE = re.compile(r"^(\d{12})-([0-9a-f]{6,32})\.json$")
#: A checkpoint's data name; its suffix must be a registered format's (:func:`is_payload_name`).
PAYLOAD_RE = re.compile(r"^step-(\d{9,})-([0-9a-f]{6,32})\.([a-z0-9]{1,16})$")
_SUFFIX_RE = re.compile(r"^[a-z0-9]{1,16}$")

Entry = dict[str, Any]


@dataclass(frozen=True)
class CheckpointFormat:
    """A checkpoint layout: the record's ``layout``, its data's ``suffix`` and whether the
    data is a ``folder`` of files (the record then lists each file's size and sha256).

    ``loader`` and ``reader`` are ``"module:function"`` (imported when called):
    ``loader(cdir, entry, into)`` is what ``load_checkpoint`` returns in a
    worker; ``reader(cdir, entry)`` what ``CheckpointStore.load`` returns in the
    notebook (plain values, no framework needed). Empty: PyTorch's ``torch.load``.
    """

    layout: str
    suffix: str
    folder: bool = False
    loader: str = ""
    reader: str = ""

    @property
    def kind(self) -> str:
        """The former name of :attr:`layout` (read-only)."""
        return self.layout


_FORMATS: dict[str, CheckpointFormat] = {}


def register_format(found: CheckpointFormat) -> CheckpointFormat:
    """Make ``found`` known here (a framework declares its formats; registering twice is
    harmless); ``ValueError`` for a bad suffix or one another layout uses."""
    if not _SUFFIX_RE.match(found.suffix):
        raise ValueError(f"checkpoint suffix {found.suffix!r}: use 1-16 of a-z and 0-9")
    for other in _FORMATS.values():
        if other.suffix == found.suffix and other.layout != found.layout:
            raise ValueError(
                f"checkpoint suffix {found.suffix!r} of layout {found.layout!r} is layout "
                f"{other.layout!r}'s already; choose another suffix"
            )
    _FORMATS[found.layout] = found
    return found


def unregister_format(layout: str) -> None:
    """Forget ``layout``'s format (a framework that was registered in-process only)."""
    _FORMATS.pop(layout, None)


def format_of(layout: str) -> CheckpointFormat | None:
    """The registered format of ``layout``, ``None`` if there is none here."""
    return _FORMATS.get(layout)


def layout_of(entry: Mapping[str, Any]) -> str:
    """A record's layout: its ``layout``, else its ``kind`` (a record of format 1), else ""."""
    value = entry.get(LAYOUT_KEY, entry.get(FORMER_LAYOUT_KEY))
    return value if isinstance(value, str) else ""


def function_of(target: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` text names (its module imported now)."""
    module, _, name = target.partition(":")
    found = getattr(importlib.import_module(module), name, None)
    if not callable(found):
        raise CheckpointError(f"checkpoint function {target!r} is not 'module:function'")
    return cast(Callable[..., Any], found)


def is_folder(entry: Entry) -> bool:
    """Whether a record's data is a folder: as its layout's format says, else as the record
    says (a folder's record lists ``files``), so a reader lists layouts it does not know."""
    found = _FORMATS.get(layout_of(entry))
    return found.folder if found is not None else isinstance(entry.get("files"), dict)


def is_payload_name(name: str) -> bool:
    """Whether ``name`` is a checkpoint's data name with a registered format's suffix."""
    match = PAYLOAD_RE.match(name)
    return match is not None and any(f.suffix == match[3] for f in _FORMATS.values())


FULL_FORMAT = register_format(CheckpointFormat(FULL, "pt"))
SHARDED_FORMAT = register_format(CheckpointFormat(SHARDED, "dcp", folder=True))
_TF = "jupyter_disttrain.runtime.checkpoint.tf"
TF_FORMAT = register_format(
    CheckpointFormat(TF, "tf", folder=True, loader=f"{_TF}:load", reader=f"{_TF}:variables")
)
_JAX = "jupyter_disttrain.runtime.checkpoint.jax"
JAX_FORMAT = register_format(
    CheckpointFormat(JAX, "jax", folder=True, loader=f"{_JAX}:load", reader=f"{_JAX}:variables")
)
for _library in (
    CheckpointFormat(HF, "hf", folder=True),
    CheckpointFormat(LIGHTNING, "ckpt"),
    CheckpointFormat(KERAS, "keras"),
):
    register_format(_library)


class CheckpointError(RuntimeError):
    """A checkpoint operation failed; the message says what and how to fix it."""


class CorruptCheckpoint(CheckpointError):
    """A listed checkpoint cannot be loaded: a file is missing or its checksum is wrong."""


def payload_name(step: int, token: str, layout: str) -> str:
    """File or folder name of a checkpoint's data; ``CheckpointError`` for a layout whose
    format is not registered here."""
    found = _FORMATS.get(layout)
    if found is None:
        raise CheckpointError(
            f"checkpoint layout {layout!r} has no registered format; its framework declares it "
            "(register_format(CheckpointFormat(layout, suffix)))"
        )
    return f"step-{step:09d}-{token}.{found.suffix}"


def not_torch_state(entry: Entry, where: str) -> str | None:
    """Why a library's checkpoint (``hf``, ``keras``) is no state to load here, with the fix."""
    layout = layout_of(entry)
    if layout == HF:
        return (
            f"checkpoint step {entry['step']} is a Hugging Face Trainer folder ({where}): resume "
            f"it with --resume {entry['step']} (Trainer.train() picks it up), or load it with "
            "from_pretrained(...) on that folder"
        )
    if layout == KERAS:
        return (
            f"checkpoint step {entry['step']} is a Keras file ({where}, written as "
            f"{entry.get('source', 'a .keras or .weights.h5 file')}): copy it to that name and "
            "load it with Keras (model.load_weights or keras.models.load_model)"
        )
    return None


def entry_name(step: int, token: str) -> str:
    """Name of a checkpoint's record under ``entries/``."""
    return f"{step:012d}-{token}.json"


def check_step(step: Any) -> int:
    """``step`` as a non-negative int; raise :class:`CheckpointError` otherwise."""
    item = getattr(step, "item", None)
    if callable(item):
        step = item()
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"checkpoint step must be an int >= 0, got {step!r}")
    return step


def make_entry(
    *,
    step: int,
    token: str,
    layout: str,
    time: float,
    nbytes: int,
    sha256: str,
    metrics: Mapping[str, float] | None = None,
    world_size: int = 1,
    versions: Mapping[str, str] | None = None,
    files: Mapping[str, tuple[int, str]] | None = None,
    job: str = "",
    run: str = "",
    tensors: int | None = None,
    parameters: int | None = None,
) -> Entry:
    """The record of one checkpoint (JSON types only)."""
    entry: Entry = {
        "format": FORMAT,
        "step": step,
        "id": token,
        LAYOUT_KEY: layout,
        FORMER_LAYOUT_KEY: layout,  # for readers of format 1 (earlier versions of this package)
        "path": payload_name(step, token, layout),
        "time": round(time, 6),
        "bytes": int(nbytes),
        "sha256": sha256,
        "metrics": {str(k): float(v) for k, v in (metrics or {}).items()},
        "world_size": int(world_size),
        "versions": dict(versions or {}),
        "job": job,
        "run": run,
    }
    if files is not None:
        entry["files"] = {name: [int(n), str(h)] for name, (n, h) in sorted(files.items())}
    if tensors is not None:
        entry["tensors"] = int(tensors)
    if parameters is not None:
        entry["parameters"] = int(parameters)
    return entry


def encode_entry(entry: Entry) -> bytes:
    """A record as bytes."""
    return json.dumps(entry, separators=(",", ":"), allow_nan=True).encode()  # metrics in order


def decode_entry(data: bytes, name: str) -> Entry:
    """Parse a record read from ``entries/NAME``; an unreadable one becomes a corrupt stub."""
    match = ENTRY_RE.match(name)
    try:
        entry = json.loads(data)
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            raise ValueError("not a checkpoint record")
        if not isinstance(entry.get("path"), str) or "/" in entry["path"]:
            raise ValueError("bad path")
    except (ValueError, UnicodeDecodeError) as exc:
        step = int(match.group(1)) if match else -1
        token = match.group(2) if match else name
        stub = make_entry(step=step, token=token, layout=FULL, time=0.0, nbytes=0, sha256="")
        return dict(stub, path="", status=CORRUPT, reason=f"unreadable record {name}: {exc}")
    return entry


def encode_manifest(entries: Mapping[str, Entry]) -> bytes:
    """The compacted manifest: records by entry name (status fields left out)."""
    clean = {
        name: {k: v for k, v in e.items() if k not in ("status", "reason")}
        for name, e in entries.items()
    }
    return json.dumps({"format": FORMAT, "entries": clean}, separators=(",", ":")).encode()


def decode_manifest(data: bytes | None) -> dict[str, Entry]:
    """Records from a manifest; an unreadable or foreign one yields nothing (it is a cache)."""
    if not data:
        return {}
    try:
        doc = json.loads(data)
        entries = doc.get("entries", {}) if isinstance(doc, dict) else {}
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {n: e for n, e in entries.items() if isinstance(e, dict) and ENTRY_RE.match(n)}


def reconcile(
    names: Iterable[str], cached: Mapping[str, Entry]
) -> tuple[dict[str, Entry], list[str]]:
    """Split the record names listed under ``entries/`` into known records and ones to read.

    Returns ``(known, missing)``: ``known`` maps each listed name the cache
    has to its record; ``missing`` lists the names to read. Cached records
    whose name is no longer listed (deleted) are dropped.
    """
    known: dict[str, Entry] = {}
    missing: list[str] = []
    for name in names:
        if not ENTRY_RE.match(name):
            continue
        if name in cached:
            known[name] = cached[name]
        else:
            missing.append(name)
    return known, sorted(missing)


def newest_per_step(records: Mapping[str, Entry]) -> tuple[list[Entry], list[str]]:
    """One record per step (the newest, by time then id), sorted by step, and the shadowed names."""
    best: dict[int, tuple[str, Entry]] = {}
    shadowed: list[str] = []
    for name, entry in records.items():
        step = int(entry["step"])
        old = best.get(step)
        key = (float(entry.get("time", 0.0)), str(entry.get("id", "")))
        if old is None:
            best[step] = (name, entry)
        elif key > (float(old[1].get("time", 0.0)), str(old[1].get("id", ""))):
            shadowed.append(old[0])
            best[step] = (name, entry)
        else:
            shadowed.append(name)
    ordered = [dict(best[s][1], entry=best[s][0]) for s in sorted(best)]
    return ordered, shadowed


def status_of(entry: Entry, sizes: Mapping[str, int | None]) -> tuple[str, str]:
    """Status from a listing of ``ROOT`` (name -> size, ``None`` for directories)."""
    if entry.get("status") == CORRUPT:
        return CORRUPT, str(entry.get("reason", "unreadable record"))
    path = str(entry.get("path", ""))
    if path not in sizes:
        return INCOMPLETE, f"{path or 'data'} is missing"
    size = sizes[path]
    if layout_of(entry) == FULL and size is not None and size != entry.get("bytes"):
        return CORRUPT, f"{path} has {size} bytes, the record says {entry.get('bytes')}"
    return OK, ""


def parse_which(which: Any) -> int | str:
    """``None``/``"latest"`` -> ``"latest"``; a step (int or digits) -> int; else a URI."""
    if which is None or which == "latest":
        return "latest"
    item = getattr(which, "item", None)
    if callable(item):
        which = item()
    if isinstance(which, int) and not isinstance(which, bool):
        return check_step(which)
    if isinstance(which, str):
        text = which.strip()
        if text.isdigit():
            return int(text)
        if text:
            return text
    raise CheckpointError(
        f"which checkpoint? expected 'latest', a step number or a checkpoint URI, got {which!r}"
    )


def select(entries: list[Entry], which: int | str) -> Entry | None:
    """The record ``which`` names among ``entries`` (sorted by step): latest, a step or a path."""
    if not entries:
        return None
    if which == "latest":
        return entries[-1]
    if isinstance(which, int):
        return next((e for e in entries if e["step"] == which), None)
    base = which.rstrip("/").rsplit("/", 1)[-1]
    return next((e for e in entries if e.get("path") == base), None)


def to_prune(
    entries: list[Entry],
    keep_last: int | None,
    keep_best: str | None = None,
    protect: Iterable[str] = (),
) -> list[Entry]:
    """Records that retention removes: all but the last ``keep_last`` steps and the best one.

    ``keep_best`` is ``"METRIC"`` (lowest kept) or ``"METRIC:max"``; the
    checkpoint with the best value of that metric is kept as well.
    ``protect`` names records (entry names) never removed.
    """
    if keep_last is None:
        return []
    if keep_last < 0:
        raise CheckpointError(f"keep_last must be 0 or more, got {keep_last}")
    keep = {e["entry"] for e in entries[max(0, len(entries) - keep_last) :]} if keep_last else set()
    keep.update(protect)
    best = best_entry(entries, keep_best) if keep_best else None
    if best is not None:
        keep.add(best["entry"])
    return [e for e in entries if e["entry"] not in keep]


def parse_best(spec: str) -> tuple[str, str]:
    """``"loss"`` -> ``("loss", "min")``; ``"accuracy:max"`` -> ``("accuracy", "max")``."""
    metric, _, mode = spec.partition(":")
    mode = mode or "min"
    if not metric or mode not in ("min", "max"):
        raise CheckpointError(f"best-by-metric must be 'METRIC' or 'METRIC:min|max', got {spec!r}")
    return metric, mode


def best_entry(entries: list[Entry], spec: str) -> Entry | None:
    """The record with the best value of a metric (``"loss"``, ``"accuracy:max"``), if any."""
    metric, mode = parse_best(spec)
    scored = [
        (float(e["metrics"][metric]), e)
        for e in entries
        if isinstance(e.get("metrics"), dict)
        and isinstance(e["metrics"].get(metric), (int, float))
        and e["metrics"][metric] == e["metrics"][metric]  # not NaN
    ]
    if not scored:
        return None
    pick = min if mode == "min" else max
    return pick(scored, key=lambda pair: pair[0])[1]
