"""JAX as a Kubeflow Trainer v2 TrainJob on the ``jax-distributed`` runtime (the emulator)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.backends.kubernetes.syntax import ConflictingOptionsError
from jupyter_disttrain.backends.kubernetes.template import PAYLOAD_DIR
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.crd_schema import validate_manifest
from tests.frameworks.test_jax import TRAIN
from tests.k8s_emulator.emulator import Emulator
from tests.optional import requires
from tests.waiting import wait_for

pytestmark = requires("jax", "JAX is an optional extra: pip install '.[jax]'")


def spec(name: str, *options: tuple[str, str], **kw: Any) -> JobSpec:
    return JobSpec(name, backend="kubernetes", framework="jax", options=options, **kw)


def render(name: str, *options: tuple[str, str], **kw: Any) -> dict[str, Any]:
    payload = build_payload("1", {}, job=name, framework="jax")
    objects = KubernetesBackend().plan(spec(name, *options, **kw), payload).objects  # type: ignore[attr-defined]
    job: dict[str, Any] = objects[1]
    validate_manifest(job)
    return job


def test_a_jax_job_is_a_trainjob_on_the_jax_distributed_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # no cluster to ask
    job = render("jx-render", nodes=3)
    assert job["kind"] == "TrainJob"
    assert job["spec"]["runtimeRef"]["name"] == "jax-distributed"
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == [
        "python",
        "-m",
        "jupyter_disttrain.runtime.worker",
        f"{PAYLOAD_DIR}/payload.pkl",
    ]
    assert trainer["numNodes"] == 3 and trainer["numProcPerNode"] == 1
    assert "image" not in trainer  # the runtime's own JAX image
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["DISTRAIN_RELAY"] == "1" and not any(k.startswith("JAX_") for k in env)
    other = render("jx-other", ("runtime", "my-jax"), ("image", "me/jax:1"), nodes=2)
    assert other["spec"]["runtimeRef"]["name"] == "my-jax"
    assert other["spec"]["trainer"]["image"] == "me/jax:1"
    with pytest.raises(
        ConflictingOptionsError, match=r"one process per pod; use --nodes 4 --nproc 1"
    ):
        render("jx-nproc", nodes=2, nproc=2)
    with pytest.raises(
        ConflictingOptionsError, match=r"v1 kinds have no JAX job: remove --kubeflow-api"
    ):
        render("jx-v1", ("kubeflow_api", "pytorchjob"))


@pytest.fixture
def trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """A cluster serving Kubeflow Trainer v2; the default kubeconfig points at it."""
    with Emulator(apis=("trainer",)) as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


@pytest.mark.slow
def test_the_jax_cell_runs_as_a_trainjob_with_every_process_metrics(trainer: Emulator) -> None:
    backend, service = KubernetesBackend(), jobs.default_service()
    plan = service.plan(
        spec("jx-train", nodes=2, timeout=240), TRAIN, {"STEPS": 20, "SAVE_EVERY": 0}
    )
    job = service.run(plan)
    value = job.result(timeout=240)
    assert value["psum"] == 3.0 and value["devices"] == 2, (value, job.logs())  # 1 + 2
    assert type(value["params"]["w"]).__module__ == "numpy"
    for rank in (0, 1):  # rank 1's lines came through rank 0's log (the relay)
        losses = [row["loss"] for row in job.metrics() if row["rank"] == rank]
        assert len(losses) == 20 and all(b < a for a, b in itertools.pairwise(losses)), losses
    ranks = job.monitor.ranks()
    assert [(r.rank, r.state) for r in ranks] == [(0, "Succeeded"), (1, "Succeeded")], ranks
    assert "process 1: psum 3.0 devices 2" in backend.logs("jx-train", rank=1)
    assert backend.stop("jx-train")
    wait_for(lambda: not trainer.processes(), 30, trainer.processes)
