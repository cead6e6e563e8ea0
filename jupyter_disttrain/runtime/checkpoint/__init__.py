"""Checkpoints in the workers: standard library, torch or TensorFlow (fsspec for URLs).

:mod:`.api` (``save_checkpoint``, ``load_checkpoint``, ``every``), :mod:`.commit`
(rank 0's commit of a save), :mod:`.format` (the directory format, pure),
:mod:`.directory` (its I/O), :mod:`.storage` (paths and fsspec URLs) and
:mod:`.tf` (TensorFlow's checkpoints in the same format).
"""

from __future__ import annotations

from .api import every, load_checkpoint, save_checkpoint

__all__ = ["every", "load_checkpoint", "save_checkpoint"]
