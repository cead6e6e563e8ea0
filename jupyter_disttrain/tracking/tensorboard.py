"""Every rank's reported metrics as TensorBoard event files (``tensorboard --logdir``).

Layout: ``ROOT/JOB/rank-R/events.out.tfevents.*``, one TensorBoard run per
rank, each ``report()`` name a tag (``loss``), so TensorBoard draws every
rank's curve on one chart per metric. A job of the same name replaces the
event files of the earlier one, as its job directory is replaced. A rank
that reports a step again (restarted from a checkpoint) gets a session
``START`` event first, so TensorBoard drops its stale later points.

Written with the ``tensorboard`` package's own record writer and protocol
buffers (``tensorboard.summary.writer.record_writer``, ``tensorboard.compat.proto``),
which import neither TensorFlow nor torch, into files named as TensorBoard's
``EventFileWriter`` names them. All ranks are written by the sink's one
thread (a ``SummaryWriter`` would start a queue and a thread per rank).
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from ..events import Event
from .sink import Feed, Sink

RANK_DIR_RE = re.compile(r"^rank-\d+$")
EVENT_FILE_PREFIX = "events.out.tfevents."


_FILE_IDS = itertools.count()


def available() -> bool:
    """True when the ``tensorboard`` package can be imported here."""
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def run_dir(root: Path, job: str, rank: int) -> Path:
    """The TensorBoard run (directory) of one rank of a job."""
    return root / job / f"rank-{rank}"


class TensorBoardSink(Sink):
    """Writes ``metric`` events under ``root/job/rank-R`` (see the module doc).

    The directories it creates are the owner's only (0700) and so are the
    event files (0600), in the job home as in a ``--tensorboard DIR`` (the
    metrics of a notebook are not everybody's); directories that already
    exist keep their mode. ``private=False`` leaves both to the umask.
    """

    name = "tensorboard"
    flush_every = 2.0

    def __init__(self, root: Path, job: str, feed: Feed, *, private: bool = True) -> None:
        self.root = Path(root)
        self.private = private
        self._writers: dict[int, Any] = {}
        self._last_step: dict[int, int] = {}
        self._cleared = False
        super().__init__(job, feed)

    def describe(self) -> str:
        """Where the event files go."""
        return f"TensorBoard files in {self.root / self.job}"

    def handle(self, event: Event) -> None:
        """Write one ``metric`` event as a TensorBoard event of its rank."""
        if event.kind != "metric" or event.rank is None or event.rank < 0:
            return
        f = event.metric()
        step = f.get("step")
        values = f.get("values")
        if not isinstance(step, int) or not isinstance(values, dict):
            return
        from tensorboard.compat.proto.event_pb2 import Event as TbEvent
        from tensorboard.compat.proto.summary_pb2 import Summary

        scalars = [
            Summary.Value(tag=str(name), simple_value=float(value))
            for name, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        ]
        if not scalars:
            return
        writer = self._writer(event.rank)
        last = self._last_step.get(event.rank)
        if last is not None and step <= last:  # a restarted rank: TensorBoard drops steps >= step
            from tensorboard.compat.proto.event_pb2 import SessionLog

            start = TbEvent(
                wall_time=event.t, step=step, session_log=SessionLog(status=SessionLog.START)
            )
            writer.write(start.SerializeToString())
        self._last_step[event.rank] = step
        event_pb = TbEvent(wall_time=event.t, step=step, summary=Summary(value=scalars))
        writer.write(event_pb.SerializeToString())

    def flush(self) -> None:
        """Flush every rank's file to disk."""
        for writer in self._writers.values():
            writer.flush()

    def finish(self, state: str | None) -> None:
        """Flush and close every rank's file."""
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()

    def abandon(self) -> None:
        """Close the files written so far."""
        self.finish(None)

    def _writer(self, rank: int) -> Any:
        writer = self._writers.get(rank)
        if writer is None:
            from tensorboard.compat.proto.event_pb2 import Event as TbEvent
            from tensorboard.summary.writer.record_writer import RecordWriter

            self._clear_earlier()
            directory = run_dir(self.root, self.job, rank)
            self._mkdir(directory)
            name = (
                f"{EVENT_FILE_PREFIX}{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_FILE_IDS)}"
            )
            mode = 0o600 if self.private else 0o666  # the umask applies to the latter
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            writer = RecordWriter(os.fdopen(fd, "wb"))  # closed in finish
            first = TbEvent(wall_time=time.time(), file_version="brain.Event:2")
            writer.write(first.SerializeToString())
            self._writers[rank] = writer
        return writer

    def _mkdir(self, directory: Path) -> None:
        if self.private:
            from ..backends.local.jobdir import make_private_dirs

            make_private_dirs(directory)
        else:
            directory.mkdir(parents=True, exist_ok=True)

    def _clear_earlier(self) -> None:
        """Remove the event files an earlier job of this name left (only those)."""
        if self._cleared:
            return
        self._cleared = True
        base = self.root / self.job
        if not base.is_dir():
            return
        for sub in base.iterdir():
            if sub.is_dir() and RANK_DIR_RE.match(sub.name):
                for path in sub.iterdir():
                    if path.name.startswith(EVENT_FILE_PREFIX) and path.is_file():
                        path.unlink()
