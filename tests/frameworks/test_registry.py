"""A framework from outside the package: registered, or found as another distribution's entry point.

The toy framework lives in a module of a temporary directory, like a third
party's; it launches one process per worker told its peers in the
environment, rules out more than two nodes, and sets each worker up with its
own runtime function. Jobs of it are planned, and one runs, on the local
backend, through the same options, spec and payload as the built-ins.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain import frameworks
from jupyter_disttrain.backends.kubernetes.images import ImagePolicy, default_image
from jupyter_disttrain.backends.local import LocalBackend, build_plan
from jupyter_disttrain.backends.registry import backend_class
from jupyter_disttrain.options import add_job_options, spec_from_args
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.plugins import UnknownPlugin
from jupyter_disttrain.results import decode_result
from jupyter_disttrain.sessions import session_spec
from jupyter_disttrain.spec import JobSpec, SpecError
from tests.backends.local.test_backend import Collector
from tests.conftest import assert_no_processes, submit_now

TOY_MODULE = textwrap.dedent(
    '''
    """A framework of a third party: peers in TOY_PEERS, this worker's index in TOY_INDEX."""
    import os
    from dataclasses import dataclass

    from jupyter_disttrain.frameworks import WORKERS, Framework
    from jupyter_disttrain.spec import SpecError


    @dataclass(frozen=True)
    class Toy(Framework):
        def check_spec(self, spec):
            if spec.nodes > 2:
                raise SpecError(f"--framework toy runs at most 2 nodes, got {spec.nodes}")

        def cluster_env(self, addresses, index):
            return {"TOY_PEERS": ",".join(addresses), "TOY_INDEX": str(index)}

        def describe_cluster(self, endpoint):
            return f"cluster: toy peers {endpoint}"


    def init(payload, rank):
        """The worker side: what the cell sees as ``peers`` and ``index``."""
        peers = os.environ["TOY_PEERS"].split(",")
        return "toy", {"peers": peers, "index": int(os.environ["TOY_INDEX"])}, {}


    TOY = Toy(name="toy", title="Toy", package="json", distributions=(), install="",
              runtime="toyframework:init", launch=WORKERS, fork_safe=True, restarts=False,
              image="example.org/toy:{json}-py{python}")
    '''
)


@pytest.fixture
def toy_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding the toy framework's module, put on ``sys.path``."""
    (tmp_path / "toyframework.py").write_text(TOY_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("toyframework", None)
        frameworks.unregister("toy")


def installed(directory: Path) -> None:
    """Make ``directory`` a distribution declaring the toy as an entry point."""
    info = directory / "toyframework-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyframework\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[jupyter_disttrain.frameworks]\ntoy = toyframework:TOY\n"
    )


def parse(line: str) -> JobSpec:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    return spec_from_args(parser.parse_args(line.split()))


def test_unknown_framework_names_the_registered_ones() -> None:
    with pytest.raises(SpecError, match=r"unknown --framework 'toy'; choose one of: pytorch, "):
        JobSpec("toy-job", framework="toy").with_()
    with pytest.raises(UnknownPlugin, match="unknown framework 'toy'; registered: pytorch, "):
        frameworks.framework("toy")
    assert not frameworks.known("toy")


def check_toy_plans(directory: Path) -> None:
    """Options, spec, payload and the local plan of a two-node toy job."""
    assert frameworks.names()[0] == "pytorch" and "toy" in frameworks.names()
    spec = parse("--framework toy --nodes 2 --name toy-job")
    assert spec.framework == "toy" and spec.world_size == 2
    with pytest.raises(SpecError, match="--framework toy runs at most 2 nodes, got 3"):
        parse("--framework toy --nodes 3")
    with pytest.raises(SpecError, match="--max-restarts with --framework toy needs --backend"):
        parse("--framework toy --max-restarts 1")
    with pytest.raises(SpecError, match="sessions run PyTorch or JAX ranks; --framework toy runs"):
        session_spec(spec)
    caps = backend_class("local").capabilities
    assert caps.runs("toy") and not caps.restarts("toy") and "toy" in caps.framework_names()
    payload = build_payload("peers", {}, job="toy-job", framework="toy")
    plan = build_plan(spec, payload, directory / "job", mode="fork", port=1, ports=[7001, 7002])
    assert [n.env["TOY_PEERS"] for n in plan.nodes] == ["127.0.0.1:7001,127.0.0.1:7002"] * 2
    assert [n.env["TOY_INDEX"] for n in plan.nodes] == ["0", "1"]
    assert [n.env["RANK"] for n in plan.nodes] == ["0", "1"]
    assert "cluster: toy peers 127.0.0.1:7001,127.0.0.1:7002" in str(plan)
    assert LocalBackend(mode="fork").launch_mode(spec) == "exec"  # its launcher does not fork


def test_a_registered_framework_plans_on_the_local_backend(toy_dir: Path) -> None:
    frameworks.register("toyframework:TOY", name="toy")
    check_toy_plans(toy_dir)
    # on a cluster its own image, unless the site names another
    versions = {"python": "3.12.1", "json": "2.0.9"}
    assert default_image("toy", versions) == "example.org/toy:2.0.9-py3.12"
    site = ImagePolicy(templates={"toy": "registry.local/toy:{json}"})
    assert default_image("toy", versions, gpus=1, policy=site) == "registry.local/toy:2.0.9"
    frameworks.unregister("toy")
    assert not frameworks.known("toy")


def test_an_installed_distributions_entry_point_plans_on_the_local_backend(
    toy_dir: Path,
) -> None:
    installed(toy_dir)
    assert frameworks.known("toy")
    check_toy_plans(toy_dir)
    sys.path.remove(str(toy_dir))  # uninstalled: the name is gone with it
    try:
        assert not frameworks.known("toy")
    finally:
        sys.path.insert(0, str(toy_dir))


@pytest.mark.slow
def test_a_toy_job_runs_its_own_worker_set_up(toy_dir: Path) -> None:
    installed(toy_dir)
    spec = JobSpec(
        "toy-run", nodes=2, framework="toy", timeout=120, env=(("PYTHONPATH", str(toy_dir)),)
    ).with_()
    payload = build_payload("(index, peers)", {}, job=spec.name, framework="toy")
    sink = Collector()
    run = submit_now(LocalBackend(mode="exec"), spec, payload, sink)
    assert run.join(120), sink.events[-20:]
    assert sink.final().get("state") == "Succeeded", sink.events[-20:]
    assert {e.get("backend") for e in sink.kinds("hello")} == {"toy"}
    (result,) = sink.kinds("result")
    index, peers = decode_result(result.fields)
    assert index == 0 and len(peers) == 2 and peers[0].startswith("127.0.0.1:")
    assert_no_processes(Path(run.plan.job_dir), sink.pids())


def test_a_frameworks_own_collectives_are_named_by_their_prefix() -> None:
    from jupyter_disttrain.frameworks import own_collectives

    assert own_collectives("jax-gloo") == "JAX" and own_collectives("tf-ring") == "TensorFlow"
    assert [own_collectives(b) for b in ("tf-nccl", "jax-cuda", "gloo", "nccl", "x-y")] == [""] * 5
