"""Checkpoints seen from the notebook.

:mod:`.store` (``CheckpointStore``: list, verify, describe, load, delete and
prune a checkpoint directory) and :mod:`.jobs` (where a job's checkpoints are,
resume cells, the ``--checkpoint-dir``/``--resume`` pre-flight). The format and
the I/O are the workers' own (:mod:`jupyter_disttrain.runtime.checkpoint`).
"""
