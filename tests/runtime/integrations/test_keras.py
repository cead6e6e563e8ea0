"""Keras ``Model.fit`` under autolog: a real job on two TensorFlow workers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.store import CheckpointStore
from tests.backends.test_local_tf import tf_payload, tf_spec
from tests.runtime.integrations.jobs import values

pytest.importorskip("tensorflow")

FIT = textwrap.dedent(
    """
    import os
    import tensorflow as tf
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    x = tf.random.stateless_normal((64, 4), seed=(1, 2))
    data = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, 1, keepdims=True)))
    task = strategy.cluster_resolver.task_id
    folder = OUT if task == 0 else os.path.join(OUT, f"worker-{task}")  # the chief's is kept
    saver = tf.keras.callbacks.ModelCheckpoint(os.path.join(folder, "model-{epoch}.weights.h5"),
                                               save_weights_only=True)
    history = model.fit(data.repeat().batch(8), epochs=3, steps_per_epoch=4, verbose=0,
                        callbacks=[saver])
    history.history["loss"]
    """
)


@pytest.mark.slow
def test_fit_reports_loss_per_epoch_progress_and_checkpoints(tmp_path: Path) -> None:
    ckpts = tmp_path / "ckpts"
    spec = tf_spec("keras-autolog", nodes=2, timeout=180, checkpoint_dir=str(ckpts))
    # made here: Keras's ModelCheckpoint checks-then-makes its folder, so the chief and the
    # worker making ``out`` and ``out/worker-1`` at once can race (FileExistsError)
    (tmp_path / "out").mkdir()
    payload = tf_payload(FIT, {"OUT": str(tmp_path / "out")}, spec.name)
    job = jobs.submit(spec, payload, LocalBackend())
    losses = job.result(timeout=180)
    assert job.status() == "Succeeded", job.logs()
    for rank in (0, 1):
        seen = values(job, rank, "loss")
        assert sorted(seen) == [4, 8, 12], (rank, job.logs())  # the batches done at each epoch
        assert values(job, rank, "epoch") == {4: 1.0, 8: 2.0, 12: 3.0}
    assert [values(job, 0, "loss")[s] for s in (4, 8, 12)] == pytest.approx(losses)
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (12, 12), progress
    infos = CheckpointStore(str(ckpts)).list()
    assert [(i.step, i.kind) for i in infos] == [(4, "keras"), (8, "keras"), (12, "keras")]
    assert all(i.ok for i in infos) and infos[-1].metrics["loss"] == pytest.approx(losses[-1])
