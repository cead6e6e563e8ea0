"""Hugging Face ``transformers.Trainer`` (and trainers built on it, such as TRL's).

Attached when ``transformers.trainer`` is imported: every ``Trainer`` gets a
``TrainerCallback`` (added by a wrapped ``Trainer.__init__``, whatever
``report_to`` says) that sends

* ``on_log``: the logged values (``loss``, ``learning_rate``, ``grad_norm``,
  ``epoch``, evaluation metrics) at ``state.global_step``, from every rank;
* ``on_step_end``: progress ``global_step`` of ``max_steps``, and, when the
  job was asked to stop (SIGTERM), ``control.should_save`` on every rank, so
  the Trainer saves at this step and the job restarts from it;
* ``on_save``: the finished ``checkpoint-N`` folder, copied into the job's
  checkpoint directory by rank 0 once every rank wrote its part.

``Trainer.train()`` without ``resume_from_checkpoint`` resumes from the
job's own latest checkpoint after a restart, or from ``--resume``, when that
is a Hugging Face checkpoint.
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


def _callback_class(base: type) -> type:
    class DistrainCallback(base):  # type: ignore[misc]
        """Sends the Trainer's logs, progress and checkpoints to the job (autolog)."""

        def __init__(self) -> None:
            self.last: dict[str, float] = {}
            self.stopping = False
            self.vote = common.StopVote()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.max_steps:
                report.auto_progress(state.global_step, state.max_steps)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            values = common.numbers(logs or {})
            self.last.update(values)
            report.auto_metrics(state.global_step, values)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.max_steps:
                report.auto_progress(state.global_step, state.max_steps)
            if not self.stopping and library.enabled() and self.vote(int(state.global_step)):
                self.stopping = True
                control.should_save = True  # every rank: the save is a collective one

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = os.path.join(str(args.output_dir), f"checkpoint-{state.global_step}")
            common.barrier()  # every rank wrote its files (its RNG state) into the folder
            if common.rank() == 0:
                library.record(folder, int(state.global_step), fmt.HF, self.last)
            if self.stopping:
                common.saved_last(int(state.global_step))

    return DistrainCallback


def attach(module: ModuleType) -> None:
    """Wrap ``Trainer.__init__`` (add the callback) and ``Trainer.train`` (resume)."""
    from transformers.trainer_callback import TrainerCallback

    trainer = module.Trainer
    callback = _callback_class(TrainerCallback)
    init, train = trainer.__init__, trainer.train

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not any(isinstance(c, callback) for c in self.callback_handler.callbacks):
            self.add_callback(callback())

    @functools.wraps(train)
    def train_(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is None:
            resume_from_checkpoint = library.resume_path(fmt.HF)
            if resume_from_checkpoint is not None and common.rank() == 0:
                print(f"distrain: resuming the Trainer from {resume_from_checkpoint}", flush=True)
        return train(self, resume_from_checkpoint, *args, **kwargs)

    trainer.__init__, trainer.train = __init__, train_


INTEGRATION = Integration(
    name="hf",
    library="transformers",
    watches=("transformers.trainer",),
    oldest=(4, 40),
    below=(6, 0),
    attach=attach,
    mentions=("transformers", "Trainer"),
    warm=("transformers.trainer",),
)
