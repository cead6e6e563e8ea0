"""Where a job's events go besides the notebook: TensorBoard event files and MLflow runs.

:func:`sinks_for` gives the sinks a spec asks for; the service attaches
them to every job it submits (each a listener that only queues, writing on
a thread of its own; see :class:`~.sink.Sink`), whatever the front door.
:func:`check` says before submitting when an option cannot be honoured here.
"""

from __future__ import annotations

from pathlib import Path

from ..backends.local.jobdir import tensorboard_root
from ..spec import TENSORBOARD_OFF, JobSpec, SpecError
from . import mlflow, tensorboard
from .sink import Feed, Sink, SinkError

__all__ = ["Sink", "SinkError", "check", "sinks_for", "tensorboard_dir"]


def check(spec: JobSpec) -> None:
    """Raise :class:`SpecError` naming the package to install for an option given."""
    if spec.tensorboard not in (None, TENSORBOARD_OFF) and not tensorboard.available():
        raise SpecError(
            "--tensorboard writes event files with the tensorboard package, which is not "
            "installed here: pip install 'jupyter_disttrain[tensorboard]'"
        )
    if spec.mlflow is not None and not mlflow.available():
        raise SpecError(
            "--mlflow logs the job with the MLflow client, which is not installed here: "
            "pip install 'jupyter_disttrain[mlflow]'"
        )


def tensorboard_dir(spec: JobSpec) -> Path | None:
    """The TensorBoard log directory holding the job's runs (``DIR/NAME``), or None for none.

    None when ``--tensorboard off``, or when no directory was given and
    the ``tensorboard`` package is not installed (event files are then an option, not a need).
    """
    if spec.tensorboard == TENSORBOARD_OFF:
        return None
    if spec.tensorboard is None:
        return tensorboard_root() / spec.name if tensorboard.available() else None
    return Path(spec.tensorboard).expanduser() / spec.name


def sinks_for(
    spec: JobSpec, feed: Feed, *, notebook: str | None = None, paths_here: bool = True
) -> list[Sink]:
    """Started sinks for ``spec``: attach each one's ``on_event`` to the job.

    ``feed`` takes a sink's warning into the job's stream; ``paths_here``
    says the job's checkpoint paths are this machine's (not a pod's).
    """
    out: list[Sink] = []
    logdir = tensorboard_dir(spec)
    if logdir is not None:
        out.append(tensorboard.TensorBoardSink(logdir.parent, spec.name, feed))
    if spec.mlflow is not None:
        out.append(
            mlflow.MlflowSink(spec.mlflow, spec, feed, notebook=notebook, paths_here=paths_here)
        )
    return out
