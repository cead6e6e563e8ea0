"""Lightning (``lightning.pytorch`` and ``pytorch_lightning``).

The callback comes through Lightning's own hook for external callbacks: the
entry-point groups ``lightning.pytorch.callbacks_factory`` and
``pytorch_lightning.callbacks_factory`` name :func:`lightning_callbacks` and
:func:`pytorch_lightning_callbacks`, which return a callback only inside a
``%%distrain`` worker whose autolog attached to that package (an empty list
anywhere else). Where the package's metadata is absent (a pod that got the
runtime as files) a wrapped ``Trainer.__init__`` adds it instead. It sends

* the values logged for a step (``self.log``, the progress-bar dict) at
  ``trainer.global_step`` with ``epoch``, from every rank: at the steps
  Lightning's own loggers get (``log_every_n_steps``), at an epoch's last step
  and the run's, and else the latest at most once a second
  (:class:`.common.StepLines`: a line per step from every rank cost the loop
  several per cent);
* after every training batch: progress against ``max_steps`` or the
  estimated stepping batches; when the job was asked to stop (SIGTERM) every
  rank saves a checkpoint there (``trainer.save_checkpoint``) and the job
  restarts from it (from ``on_train_start`` on, SIGTERM goes to the job's
  handler, not to the one ``fit`` installed);
* every checkpoint ``Trainer.save_checkpoint`` finished (``ModelCheckpoint``'s
  and the cell's own), copied into the job's checkpoint directory by rank 0.

``Trainer.fit()`` without ``ckpt_path`` resumes from the job's own latest
checkpoint after a restart, or from ``--resume``, when that is a Lightning one.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from types import ModuleType
from typing import Any

from .. import preemption, report
from ..checkpoint import format as fmt
from ..checkpoint import library
from . import Integration, common

#: Packages (``lightning.pytorch``, ``pytorch_lightning``) this worker attached to.
_ready: set[str] = set()
_classes: dict[str, type] = {}


def _total(trainer: Any) -> int:
    """The run's optimizer steps: ``max_steps``, else Lightning's estimate (0: unknown)."""
    if int(getattr(trainer, "max_steps", -1) or -1) > 0:
        return int(trainer.max_steps)
    try:
        estimate = float(trainer.estimated_stepping_batches)
    except Exception:
        return 0
    return int(estimate) if math.isfinite(estimate) else 0


def _step_values(trainer: Any) -> dict[str, float]:
    """What was logged for this step (``self.log`` with ``on_step``), as numbers."""
    connector = getattr(trainer, "_logger_connector", None)
    try:
        values = dict(connector.metrics["callback"]) if connector is not None else {}
    except Exception:
        values = dict(trainer.callback_metrics)
    return common.numbers(values)


def _take_sigterm_back() -> None:
    """SIGTERM to the job's handler again, over the one ``Trainer.fit`` put first.

    Lightning's handler broadcasts from inside the signal handler and ends the
    signalled rank alone at its next step, which leaves the others in a
    collective with a peer gone; the job's own vote makes every rank stop at one
    step. (``fit`` puts the handlers it found back when it ends.)
    """
    try:
        preemption.install()
    except ValueError:  # not the main thread: Lightning's handler stays
        pass


def _callback_class(base: type) -> type:
    class DistrainCallback(base):  # type: ignore[misc]
        """Sends the Trainer's logged values, progress and stop requests to the job."""

        def __init__(self) -> None:
            self.stopping = False
            self.vote = common.StopVote()
            self.lines = common.StepLines(report.auto_metrics)
            self.total = 0
            self.every_n = 0

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if preemption.installed():
                _take_sigterm_back()
            self.total = _total(trainer)
            self.every_n = max(0, int(getattr(trainer, "log_every_n_steps", 0) or 0))
            if self.total:
                report.auto_progress(trainer.global_step, self.total)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
            step = int(trainer.global_step)
            values = _step_values(trainer)
            if values:
                due = self.every_n > 0 and step % self.every_n == 0
                self.lines.offer(step, {**values, "epoch": trainer.current_epoch}, due)
            if self.total:
                report.auto_progress(step, self.total)
            if not self.stopping and library.enabled() and self.vote(step):
                self.stopping = True
                self.lines.flush()
                callback = trainer.checkpoint_callback
                folder = getattr(callback, "dirpath", None) or os.path.join(
                    str(trainer.default_root_dir), "checkpoints"
                )
                trainer.save_checkpoint(os.path.join(folder, f"preempted-step={step}.ckpt"))
                common.saved_last(step)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.lines.flush()

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self.lines.flush()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.lines.flush()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.lines.flush()

    return DistrainCallback


def _callbacks(package: str) -> list[Any]:
    if package not in _ready:
        return []
    return [_classes[package]()]


def lightning_callbacks() -> list[Any]:
    """``lightning.pytorch.callbacks_factory``: the callback inside a worker, else none."""
    return _callbacks("lightning.pytorch")


def pytorch_lightning_callbacks() -> list[Any]:
    """``pytorch_lightning.callbacks_factory``: the callback inside a worker, else none."""
    return _callbacks("pytorch_lightning")


def _factory_declared(package: str) -> bool:
    """Whether Lightning will find our factory among its entry points."""
    try:
        from importlib import metadata

        points = metadata.entry_points().select(group=f"{package}.callbacks_factory")
    except Exception:
        return False
    return any(point.value.startswith(__name__ + ":") for point in points)


def attach(module: ModuleType) -> None:
    """Make the callback class; wrap ``Trainer.save_checkpoint`` and ``Trainer.fit``."""
    package = module.__name__
    trainer = module.Trainer
    _classes[package] = _callback_class(module.Callback)
    save, fit = trainer.save_checkpoint, trainer.fit
    signature = inspect.signature(fit)

    @functools.wraps(save)
    def save_checkpoint(self: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        out = save(self, filepath, *args, **kwargs)  # rank 0 wrote it; every rank waited
        if common.rank() == 0 and isinstance(filepath, (str, os.PathLike)):
            metrics = common.numbers(dict(self.callback_metrics))
            library.record(os.fspath(filepath), int(self.global_step), fmt.LIGHTNING, metrics)
        return out

    @functools.wraps(fit)
    def fit_(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("ckpt_path") is None:
            path = library.resume_path(fmt.LIGHTNING)
            if path is not None:
                bound.arguments["ckpt_path"] = path
                if common.rank() == 0:
                    print(f"distrain: resuming Trainer.fit from {path}", flush=True)
        return fit(*bound.args, **bound.kwargs)

    trainer.save_checkpoint, trainer.fit = save_checkpoint, fit_
    if not _factory_declared(package):
        init = trainer.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            self.callbacks.extend(_callbacks(package))

        trainer.__init__ = __init__
    _ready.add(package)


INTEGRATION = Integration(
    name="lightning",
    library="lightning",
    watches=("lightning.pytorch", "pytorch_lightning"),
    oldest=(2, 0),
    below=(3, 0),
    attach=attach,
    mentions=("lightning",),
    warm=("lightning.pytorch", "pytorch_lightning"),
)
