"""A tiny fork server for the crash-during-save test: torch is imported once, savers are forked.

``python -m tests.runtime.crash_saver`` reads commands on stdin, one a line:

* ``go DIR START SIZE KEEP``: fork a saver that saves checkpoints ``START``,
  ``START+1``, ... of a ``SIZE``-float state into ``DIR`` (keeping the last
  ``KEEP``; all when negative) until it is killed; it writes ``saved STEP`` after each returns.
  The server answers ``pid PID``.
* ``reap``: wait for the last saver to end (the test killed it); answer ``reaped``.

All output goes to stdout as whole lines. EOF on stdin ends the server (and
kills a saver still running).
"""

from __future__ import annotations

import os
import signal
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from jupyter_disttrain.runtime.checkpoint.api import save_checkpoint


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def saver(directory: str, start: int, size: int, keep: int) -> None:
    os.environ["DISTRAIN_CHECKPOINT_DIR"] = directory
    os.environ["DISTRAIN_JOB_ID"] = "crash"
    sys.stdout = open(os.devnull, "w")  # protocol lines: not needed here
    gen = torch.Generator().manual_seed(start)
    step = start
    while True:
        state = {"w": torch.randn(size, generator=gen), "step": step, "note": "x" * (step % 97)}
        save_checkpoint(
            state, step, {"loss": 1.0 / (step + 1)}, keep_last=keep if keep >= 0 else None
        )
        say(f"saved {step}")
        step += 1


def main() -> int:
    child = 0
    for line in sys.stdin:
        parts = line.split()
        if parts and parts[0] == "go":
            child = os.fork()
            if child == 0:
                try:
                    saver(parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
                finally:
                    os._exit(1)
            say(f"pid {child}")
        elif parts == ["reap"] and child:
            os.waitpid(child, 0)
            child = 0
            say("reaped")
    if child:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
