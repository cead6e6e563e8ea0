"""Keras ``Model.fit`` under autolog: a real job on two TensorFlow workers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.checkpoints.store import CheckpointStore
from tests.backends.kubernetes.test_tf import cluster  # noqa: F401 (a fixture)
from tests.backends.local.test_tf import tf_payload, tf_spec
from tests.optional import requires
from tests.runtime.integrations.jobs import values

pytestmark = requires("tensorflow")

FIT = textwrap.dedent(
    """
    import os
    import tensorflow as tf
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    x = tf.random.stateless_normal((64, 4), seed=(1, 2))
    data = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, 1, keepdims=True)))
    rank = int(os.environ["RANK"])  # a TFJob's chief and first worker both have task_id 0
    folder = OUT if rank == 0 else os.path.join(OUT, f"worker-{rank}")  # the chief's is kept
    saver = tf.keras.callbacks.ModelCheckpoint(os.path.join(folder, "model-{epoch}.weights.h5"),
                                               save_weights_only=True)
    history = model.fit(data.repeat().batch(8), epochs=EPOCHS, steps_per_epoch=4, verbose=0,
                        callbacks=[saver])
    {"losses": history.history["loss"]}
    """
)


@pytest.mark.slow
def test_fit_reports_loss_per_epoch_progress_checkpoints_and_resumes(tmp_path: Path) -> None:
    ckpts = tmp_path / "ckpts"
    spec = tf_spec("keras-autolog", nodes=2, timeout=180, checkpoint_dir=str(ckpts))
    # made here: Keras's ModelCheckpoint checks-then-makes its folder, so the chief and the
    # worker making ``out`` and ``out/worker-1`` at once can race (FileExistsError)
    (tmp_path / "out").mkdir()
    names = {"OUT": str(tmp_path / "out"), "EPOCHS": 3}
    job = jobs.submit(spec, tf_payload(FIT, names, spec.name), LocalBackend())
    first = job.result(timeout=180)
    losses = first["losses"]
    assert job.status() == "Succeeded", job.logs()
    for rank in (0, 1):
        seen = values(job, rank, "loss")
        assert sorted(seen) == [4, 8, 12], (rank, job.logs())  # the batches done at each epoch
        assert values(job, rank, "epoch") == {4: 1.0, 8: 2.0, 12: 3.0}
    assert [values(job, 0, "loss")[s] for s in (4, 8, 12)] == pytest.approx(losses)
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (12, 12), progress
    store = CheckpointStore(str(ckpts))
    infos = store.list()
    assert [(i.step, i.layout) for i in infos] == [(4, "keras"), (8, "keras"), (12, "keras")]
    assert all(i.ok for i in infos) and infos[-1].metrics["loss"] == pytest.approx(losses[-1])
    assert infos[-1].metrics["epoch"] == 3.0
    # --resume latest: every worker loads the listed step-12 weights, fit goes on at epoch 4
    out2 = tmp_path / "out2"
    out2.mkdir()
    spec2 = tf_spec(
        "keras-resume", nodes=2, timeout=180, checkpoint_dir=str(ckpts), resume="latest"
    )
    again = jobs.submit(
        spec2, tf_payload(FIT, {"OUT": str(out2), "EPOCHS": 5}, spec2.name), LocalBackend()
    )
    second = again.result(timeout=180)
    assert again.status() == "Succeeded", again.logs()
    assert "resuming Model.fit from" in again.logs() and "(model-3.weights.h5)" in again.logs()
    assert len(second["losses"]) == 2, (second, again.logs())  # epochs 4 and 5 only
    for rank in (0, 1):
        assert values(again, rank, "epoch") == {16: 4.0, 20: 5.0}, (rank, again.logs())
    progress = again.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (20, 20), progress
    assert [(i.step, i.layout) for i in store.list()][-2:] == [(16, "keras"), (20, "keras")]
    # it went on from the first job's weights: one SGD epoch from them, not from a fresh start
    assert second["losses"][0] < losses[0] / 2, (losses, second["losses"])


@pytest.mark.slow
@pytest.mark.usefixtures("cluster")
def test_a_tfjob_on_the_emulator_shows_the_chiefs_epochs_and_progress(
    tmp_path: Path,
) -> None:
    """The same fit as a TFJob (a chief and a worker pod): the chief's loss per epoch.

    A TFJob has no c10d store to relay through, so the notebook follows the
    chief's pod log: the worker's own lines stay in its pod's log.
    """
    (tmp_path / "out").mkdir()  # as above: the chief and the worker would both make it
    spec = tf_spec("tfjob-keras", nodes=2, timeout=240, backend="kubernetes")
    backend = KubernetesBackend()
    names = {"OUT": str(tmp_path / "out"), "EPOCHS": 3}
    plan = backend.plan(spec, tf_payload(FIT, names, spec.name))
    assert plan.objects[1]["kind"] == "TFJob"
    job = jobs.default_service().run(plan)
    losses = job.result(timeout=240)["losses"]
    assert values(job, 0, "epoch") == {4: 1.0, 8: 2.0, 12: 3.0}, job.logs()
    assert [values(job, 0, "loss")[s] for s in (4, 8, 12)] == pytest.approx(losses)
    progress = job.monitor.snapshot()["progress"]
    assert progress is not None and (progress["step"], progress["total"]) == (12, 12), progress
    assert backend.stop("tfjob-keras")
