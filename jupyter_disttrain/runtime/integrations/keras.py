"""Keras 3 ``Model.fit`` (TensorFlow jobs).

Attached when ``keras`` is imported: ``Model.fit`` gets one more callback that
sends each epoch's logs (``loss``, metrics, ``val_*``) at the global batch
count with ``epoch``, from every worker, and progress against
``epochs * steps``; and, after each epoch, the file a ``ModelCheckpoint`` of
the same ``fit`` finished, copied into the job's checkpoint directory by the
chief (rank 0).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

from .. import report
from ..checkpoint import format as fmt
from ..checkpoint import library
from . import Integration, common


def _callback_class(keras: ModuleType) -> type:
    class DistrainCallback(keras.callbacks.Callback):  # type: ignore[misc, name-defined]
        """Sends ``fit``'s epoch logs, progress and checkpoints to the job (autolog)."""

        def __init__(self, savers: list[Any]) -> None:
            super().__init__()
            self.savers = savers
            self.step = 0
            self.total = 0
            self.seen: dict[str, float] = {}

        def on_train_begin(self, logs: Any = None) -> None:
            epochs, steps = self.params.get("epochs"), self.params.get("steps")
            self.total = int(epochs or 0) * int(steps or 0)
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
                library.record(path, self.step, fmt.KERAS, values)

    return DistrainCallback


def attach(module: ModuleType) -> None:
    """Wrap ``keras.Model.fit`` to add the callback."""
    model = module.Model
    fit = model.fit
    callback = _callback_class(module)

    @functools.wraps(fit)
    def fit_(self: Any, *args: Any, **kwargs: Any) -> Any:
        given = list(kwargs.get("callbacks") or [])
        savers = [c for c in given if isinstance(c, module.callbacks.ModelCheckpoint)]
        kwargs["callbacks"] = [*given, callback(savers)]
        return fit(self, *args, **kwargs)

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
