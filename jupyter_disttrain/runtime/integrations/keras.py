"""Keras 3 ``Model.fit`` (TensorFlow jobs).

Attached when ``keras`` is imported: ``Model.fit`` gets one more callback that
sends each epoch's logs (``loss``, metrics, ``val_*``) at the global batch
count with ``epoch``, from every worker, and progress against
``epochs * steps``; and, after each epoch, the file a ``ModelCheckpoint`` of
the same ``fit`` finished, copied into the job's checkpoint directory by the
chief (rank 0), with the epoch among its values.

When the run resumes (after a restart, the job's own latest; else
``--resume``) from a Keras checkpoint, every worker's ``fit`` first loads its
weights (``model.load_weights``, under the name Keras wrote, whose suffix
chooses the loader) and, unless the cell gives ``initial_epoch``, goes on
from the epoch after the one saved (the first ``fit`` of the run only).
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import tempfile
from types import ModuleType
from typing import Any

from .. import report
from ..checkpoint import format as fmt
from ..checkpoint import library
from . import Integration, common


def _callback_class(keras: ModuleType) -> type:
    class DistrainCallback(keras.callbacks.Callback):  # type: ignore[misc, name-defined]
        """Sends ``fit``'s epoch logs, progress and checkpoints to the job (autolog)."""

        def __init__(self, savers: list[Any], initial_epoch: int = 0) -> None:
            super().__init__()
            self.savers = savers
            self.initial_epoch = initial_epoch
            self.step = 0
            self.total = 0
            self.seen: dict[str, float] = {}

        def on_train_begin(self, logs: Any = None) -> None:
            epochs, steps = self.params.get("epochs"), self.params.get("steps")
            self.total = int(epochs or 0) * int(steps or 0)
            self.step = self.initial_epoch * int(steps or 0)
            if self.total:
                report.auto_progress(self.step, self.total)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            if self.total:
                report.auto_progress(self.step, self.total)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            values = common.numbers(dict(logs or {}))
            report.auto_metrics(self.step, {**values, "epoch": epoch + 1})
            if common.rank() == 0:
                for saver in self.savers:
                    self._record(saver, epoch, logs or {}, values)

        def _record(self, saver: Any, epoch: int, logs: Any, values: dict[str, float]) -> None:
            try:
                path = str(saver._get_file_path(epoch, None, logs))
                mtime = os.stat(path).st_mtime
            except (OSError, AttributeError, KeyError, ValueError):
                return
            if self.seen.get(path) != mtime:
                self.seen[path] = mtime
                library.record(path, self.step, fmt.KERAS, {**values, "epoch": epoch + 1})

    return DistrainCallback


_resumed = False


def _resume(model: Any) -> int | None:
    """Load the Keras checkpoint this run resumes from into ``model``; its epoch (or None).

    Once a process: a cell's second ``fit`` goes on from the first one's weights.
    """
    global _resumed
    if _resumed:
        return None
    _resumed = True
    found = library.resume_checkpoint(fmt.KERAS)
    if found is None:
        return None
    path, entry = found
    source = os.path.basename(str(entry.get("source") or "")) or os.path.basename(path)
    local = os.path.join(tempfile.mkdtemp(prefix="distrain-keras-"), source)
    shutil.copyfile(path, local)  # Keras picks its loader by the file name's suffix
    model.load_weights(local)
    if common.rank() == 0:
        print(f"distrain: resuming Model.fit from {path} ({source})", flush=True)
    epoch = dict(entry.get("metrics") or {}).get("epoch")
    return None if epoch is None else int(epoch)


def attach(module: ModuleType) -> None:
    """Wrap ``keras.Model.fit``: resume, then fit with the callback added."""
    model = module.Model
    fit = model.fit
    signature = inspect.signature(fit)
    callback = _callback_class(module)

    @functools.wraps(fit)
    def fit_(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        epoch = _resume(self)
        if epoch is not None and "initial_epoch" not in bound.arguments:
            bound.arguments["initial_epoch"] = epoch
        given = list(bound.arguments.get("callbacks") or [])
        savers = [c for c in given if isinstance(c, module.callbacks.ModelCheckpoint)]
        start = int(bound.arguments.get("initial_epoch") or 0)
        bound.arguments["callbacks"] = [*given, callback(savers, start)]
        return fit(*bound.args, **bound.kwargs)

    model.fit = fit_


INTEGRATION = Integration(
    name="keras",
    library="keras",
    watches=("keras",),
    oldest=(3, 0),
    below=(4, 0),
    attach=attach,
    mentions=("keras", ".fit("),
)
