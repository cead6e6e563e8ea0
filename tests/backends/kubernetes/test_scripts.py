"""``disttrain run ... SCRIPT.py ARGS`` on Kubernetes (the emulator): PyTorchJob, TrainJob, TFJob.

Each pod writes the shipped copy of the script's folder (the script and the
modules it imports) to a writable folder of its own and runs it there, as
``torchrun SCRIPT.py ARGS`` would from that folder.
"""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_disttrain import cli
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.script import SCRIPT_DIR
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.runtime.cell import SCRIPT_DIR_ENV
from jupyter_disttrain.spec import JobSpec
from tests.crd_schema import validate_manifest
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface
from tests.test_cli_scripts import FAIL_LINE, TRAIN, facts, make_project
from tests.waiting import wait_for

#: What a pod's script folder holds: the script and its modules; no data file, nothing unused.
IN_POD = ["datautils.py", "helpers.py", "models", "train.py"]

MNIST_SETUP = textwrap.dedent(
    """\
    import numpy as np
    import tensorflow as tf


    def mnist_dataset(batch_size):
        rng = np.random.default_rng(0)
        x_train = rng.random((256, 28, 28)).astype("float32")
        y_train = rng.integers(0, 10, 256).astype("int64")
        return (tf.data.Dataset.from_tensor_slices((x_train, y_train))
                .shuffle(256).repeat().batch(batch_size))


    def build_and_compile_cnn_model():
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(4, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(10),
        ])
        model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
                      metrics=["accuracy"])
        return model
    """
)
MAIN = textwrap.dedent(
    """\
    import argparse
    import json
    import os
    import sys

    import tensorflow as tf

    import mnist_setup

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=70)
    args = parser.parse_args()
    per_worker_batch_size = 64
    tf_config = json.loads(os.environ["TF_CONFIG"])
    num_workers = len(tf_config["cluster"]["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch_size = per_worker_batch_size * num_workers
    multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)
    with strategy.scope():
        multi_worker_model = mnist_setup.build_and_compile_cnn_model()
    history = multi_worker_model.fit(multi_worker_dataset, epochs=args.epochs,
                                     steps_per_epoch=args.steps, verbose=0)
    print("FACTS " + json.dumps({
        "rank": tf_config["task"]["index"] + (tf_config["task"]["type"] == "worker"),
        "task": tf_config["task"]["type"], "argv": sys.argv, "file": __file__, "cwd": os.getcwd(),
        "folder": sorted(n for n in os.listdir(".") if n.endswith(".py")),
        "losses": len(history.history["loss"]),
    }), flush=True)
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """One emulated cluster serving Kubeflow v1 (PyTorchJob, TFJob) and Trainer v2."""
    env = {
        "GLOO_SOCKET_IFNAME": pod_interface(),
        "NCCL_SOCKET_IFNAME": pod_interface(),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    before = os.environ.get("KUBECONFIG")
    with Emulator(env=env, apis=("kubeflow-v1", "trainer")) as emulator:
        config = emulator.write_kubeconfig(tmp_path_factory.mktemp("k8s") / "kubeconfig")
        os.environ["KUBECONFIG"] = str(config)
        try:
            yield emulator
        finally:
            if before is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = before


def rank_facts(name: str, ranks: int) -> dict[int, dict[str, Any]]:
    """Each rank's FACTS line, from its own log on the cluster."""
    backend = KubernetesBackend()
    out: dict[int, dict[str, Any]] = {}
    for rank in range(ranks):
        out.update(facts(backend.logs(name, rank=rank)))
    return out


def finish(cluster: Emulator, name: str) -> None:
    assert KubernetesBackend().stop(name)
    wait_for(lambda: not cluster.processes(), 60, cluster.processes)


# --- manifests (no cluster) -------------------------------------------------------------------


def render(cwd: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_disttrain.cli", "render", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": str(cwd / "no-kubeconfig")},
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def payload_of(secret: dict[str, Any]) -> dict[str, Any]:
    assert secret["kind"] == "Secret"  # the payload carries the job's key
    envelope = pickle.loads(base64.b64decode(secret["data"]["payload.pkl"]))
    assert isinstance(envelope, dict)
    return envelope


def test_rendered_manifests_carry_the_script_its_arguments_and_its_folder(tmp_path: Path) -> None:
    proj, elsewhere = make_project(tmp_path)
    (proj / "main.py").write_text("import mnist_setup\n")
    (proj / "mnist_setup.py").write_text("X = 1\n")
    script_dir = {"name": "script", "mountPath": SCRIPT_DIR}
    variable = {"name": SCRIPT_DIR_ENV, "value": SCRIPT_DIR}
    for api in ("trainjob", "pytorchjob"):
        docs = render(
            elsewhere,
            "--backend",
            "kubernetes",
            "--kubeflow-api",
            api,
            "--nodes",
            "2",
            "--nproc",
            "2",
            "../proj/train.py",
            "2",
            "1",
            "--batch_size",
            "4",
        )
        job = docs[1]
        validate_manifest(job)
        run = payload_of(docs[0])["script"]
        assert run["argv"] == ["../proj/train.py", "2", "1", "--batch_size", "4"]
        assert sorted(run["files"]) == [
            "datautils.py",
            "helpers.py",
            "models/__init__.py",
            "models/net.py",
            "train.py",
        ]
        if api == "trainjob":
            pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
                "replicatedJobs"
            ][0]["template"]["spec"]["template"]["spec"]
            container, env = pod["containers"][0], job["spec"]["trainer"]["env"]
        else:
            pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
            container = pod["containers"][0]
            env = container["env"]
            assert container["workingDir"] == SCRIPT_DIR
        assert {"name": "script", "emptyDir": {}} in pod["volumes"]
        assert script_dir in container["volumeMounts"] and variable in env
    docs = render(
        elsewhere,
        "--backend",
        "kubernetes",
        "--framework",
        "tensorflow",
        "--nodes",
        "2",
        "../proj/main.py",
        "--epochs",
        "1",
    )
    validate_manifest(docs[1])
    chief = docs[1]["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    assert chief["workingDir"] == SCRIPT_DIR and variable in chief["env"]
    assert sorted(payload_of(docs[0])["script"]["files"]) == ["main.py", "mnist_setup.py"]
    # --dry-run prints the same YAML, what travels first as a comment.
    dry = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_disttrain.cli",
            "run",
            "--backend",
            "kubernetes",
            "--dry-run",
            "../proj/train.py",
            "2",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": str(elsewhere / "no-kubeconfig")},
    )
    assert dry.returncode == 0, dry.stderr
    first = dry.stdout.splitlines()[0]
    assert first.startswith("# script ../proj/train.py 2 (") and "datautils (local module" in first
    assert [d["kind"] for d in yaml.safe_load_all(dry.stdout) if d] == ["Secret", "TrainJob"]
    # A cell's pods are as they were: no script folder.
    spec = JobSpec("cell-pods", backend="kubernetes", options=(("kubeflow_api", "pytorchjob"),))
    objects = KubernetesBackend().objects(spec, build_payload("1", {}, job="cell-pods"))
    assert "workingDir" not in str(objects) and SCRIPT_DIR_ENV not in str(objects)


# --- real jobs on the emulator ----------------------------------------------------------------


@pytest.mark.slow
def test_a_script_runs_as_a_pytorchjob_from_its_shipped_folder(
    cluster: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    _, elsewhere = make_project(tmp_path)
    monkeypatch.chdir(elsewhere)
    name = "script-ptj"
    code = cli.main(
        [
            "run",
            "--backend",
            "kubernetes",
            "--kubeflow-api",
            "pytorchjob",
            "--nodes",
            "2",
            "--nproc",
            "2",
            "--name",
            name,
            "--timeout",
            "240",
            "../proj/train.py",
            "2",
            "1",
            "--batch_size",
            "4",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "job Succeeded" in out.out
    got = rank_facts(name, 4)
    assert sorted(got) == [0, 1, 2, 3], got
    for found in got.values():
        folder = os.path.dirname(found["file"])
        assert found["argv"] == [found["file"], "2", "1", "--batch_size", "4"], found
        assert os.path.basename(found["file"]) == "train.py" and found["name"] == "__main__"
        assert found["cwd"] == found["path0"] == folder != str(elsewhere)
        assert found["folder"] == IN_POD and found["beside_me"]
        assert found["args"] == {
            "total_epochs": 2,
            "save_every": 1,
            "batch_size": 4,
            "fail_rank": -1,
        }
        assert (found["model"], found["data"]) == ("tiny-net", 4)
        assert found["wrote"]  # in its working directory, in the pod
        if cluster.podnet is None:  # the loopback fallback: the pod's folder is on this host
            assert os.path.exists(os.path.join(folder, f"written-by-rank-{found['rank']}.txt"))
    assert not list(elsewhere.iterdir())  # nothing ran here
    finish(cluster, name)


@pytest.mark.slow
def test_a_trainjob_rank_that_raises_names_the_shipped_scripts_line(
    cluster: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    _, elsewhere = make_project(tmp_path)
    monkeypatch.chdir(elsewhere)
    name = "script-tj"
    code = cli.main(
        [
            "run",
            "--backend",
            "kubernetes",
            "--kubeflow-api",
            "trainjob",
            "--nodes",
            "2",
            "--name",
            name,
            "--timeout",
            "240",
            "../proj/train.py",
            "1",
            "1",
            "--fail-rank",
            "1",
        ]
    )
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    got = facts(out.out)  # every rank's lines, as the command showed them
    shipped = got[1]["file"]
    assert got[1]["folder"] == IN_POD and got[1]["argv"][1:] == ["1", "1", "--fail-rank", "1"]
    trace = out.err.split("Remote traceback (rank 1):", 1)[1]
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    assert frames == [
        f'File "{shipped}", line {len(TRAIN.splitlines())}, in <module>',
        f'File "{shipped}", line {FAIL_LINE}, in main',
    ], trace
    assert 'raise RuntimeError(f"failing on rank {rank}")' in trace
    assert "ModuleNotFoundError" not in out.out + out.err
    assert "job Failed" in out.out
    finish(cluster, name)


@pytest.mark.slow
def test_a_missing_package_fails_at_once_with_the_pip_fix(
    cluster: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The script imports a package this machine has and the pods do not."""
    site = tmp_path / "extra" / "site-packages"
    (site / "fakepkg_xyz").mkdir(parents=True)
    (site / "fakepkg_xyz" / "__init__.py").write_text("")
    info = site / "fakepkg_xyz-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg-xyz\nVersion: 1.2.3\n")
    (info / "top_level.txt").write_text("fakepkg_xyz\n")
    monkeypatch.syspath_prepend(str(site))
    (tmp_path / "uses.py").write_text("import fakepkg_xyz\nprint('never')\n")
    monkeypatch.chdir(tmp_path)
    name = "script-pip"
    code = cli.main(
        [
            "run",
            "--backend",
            "kubernetes",
            "--kubeflow-api",
            "pytorchjob",
            "--name",
            name,
            "--timeout",
            "120",
            "uses.py",
        ]
    )
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    missing = "the script uses packages this worker does not have: fakepkg-xyz==1.2.3"
    assert f"{missing}; add --pip fakepkg-xyz==1.2.3" in out.err, out.err
    assert "never" not in KubernetesBackend().logs(name, rank=0)
    finish(cluster, name)  # a failed job whose pod restarted is deleted with what it owns


@pytest.mark.slow
def test_a_keras_script_and_its_sibling_run_as_a_tfjob(
    cluster: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The TensorFlow multi-worker tutorial's shape: ``main.py`` importing ``mnist_setup``."""
    proj = tmp_path / "tutorial"
    proj.mkdir()
    (proj / "main.py").write_text(MAIN)
    (proj / "mnist_setup.py").write_text(MNIST_SETUP)
    monkeypatch.chdir(tmp_path)
    name = "script-tf"
    code = cli.main(
        [
            "run",
            "--backend",
            "kubernetes",
            "--framework",
            "tensorflow",
            "--nodes",
            "2",
            "--name",
            name,
            "--timeout",
            "240",
            "tutorial/main.py",
            "--epochs",
            "1",
            "--steps",
            "3",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    got = rank_facts(name, 2)
    assert [got[r]["task"] for r in (0, 1)] == ["chief", "worker"], got
    for found in got.values():
        assert found["argv"] == [found["file"], "--epochs", "1", "--steps", "3"]
        assert found["cwd"] == os.path.dirname(found["file"])
        assert found["folder"] == ["main.py", "mnist_setup.py"] and found["losses"] == 1
    finish(cluster, name)
