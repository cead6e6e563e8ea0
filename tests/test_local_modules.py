"""The user's own modules travel with the cell: found, listed with their size, run on workers."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.local_modules import (
    MAX_MODULE_BYTES,
    collect,
    local_root,
    names_in_pickle,
    names_in_source,
    package_versions,
)
from jupyter_disttrain.payload import CaptureError, build_payload

HELPER = textwrap.dedent(
    """
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 1)

        def forward(self, x):
            return self.fc(x)

    def scale(x):
        return 3 * x
    """
)


@pytest.fixture
def notebook_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder beside a notebook with ``mymodels.py`` and a package ``mypkg``; on sys.path here."""
    (tmp_path / "mymodels.py").write_text(HELPER)
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("from .util import twice\n")
    (tmp_path / "mypkg" / "util.py").write_text("def twice(x):\n    return 2 * x\n")
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("mymodels", "mypkg", "mypkg.util"):
            sys.modules.pop(name, None)


#: Installed modules, among them some whose distribution is named otherwise (yaml, PIL, attr)
#: and a namespace package several distributions share (google).
INSTALLED = "torch numpy yaml google PIL IPython attr typing_extensions jax keras plotly".split()


def test_package_versions_name_the_distribution_that_installs_each_module() -> None:
    """The answers importlib's map of every distribution gives (any of a namespace's)."""
    import importlib.metadata

    every = importlib.metadata.packages_distributions()
    found = package_versions(INSTALLED)
    assert set(found) == {name for name in INSTALLED if name in every}
    assert {"torch", "yaml", "PIL", "google"} <= set(found)
    for name, (dist, version) in found.items():
        assert dist in every[name], (name, dist, every[name])
        assert version == importlib.metadata.version(dist), (name, dist, version)


def test_package_versions_leave_out_local_stdlib_and_missing_modules(notebook_dir: Path) -> None:
    importlib.import_module("mymodels")
    assert package_versions(["mymodels", "mypkg", "os", "json", "no_such_module_here"]) == {}


def test_only_modules_outside_the_stdlib_and_site_packages_are_local(notebook_dir: Path) -> None:
    assert local_root("mymodels") == notebook_dir / "mymodels.py"
    assert local_root("mypkg") == notebook_dir / "mypkg"
    for installed in ("json", "torch", "cloudpickle", "jupyter_disttrain", "sys", "nope_xyz"):
        assert local_root(installed) is None, installed
    files = collect(["mypkg", "torch"])
    assert set(files) == {"mypkg"} and set(files["mypkg"]) == {"mypkg/__init__.py", "mypkg/util.py"}


def test_a_cell_using_a_helper_lists_it_as_a_local_module(notebook_dir: Path) -> None:
    import cloudpickle

    mymodels = importlib.import_module("mymodels")
    net = mymodels.Net()
    assert "mymodels" in names_in_pickle(cloudpickle.dumps(net))
    assert names_in_source("from mypkg import twice\nimport os") == {"mypkg", "os"}
    payload = build_payload("from mypkg import twice\ntwice(net(x))", {"net": net, "x": 1}, job="j")
    captured = {c.name: c.captured_as for c in payload.captures}
    assert captured["mymodels"] == "local module" and captured["mypkg"] == "local module"
    assert "mymodels (local module," in payload.describe()


def test_a_module_too_big_to_ship_names_the_fix(notebook_dir: Path) -> None:
    (notebook_dir / "huge.py").write_text("X = '" + "a" * (MAX_MODULE_BYTES + 10) + "'\n")
    with pytest.raises(CaptureError, match=r"too big to travel with the cell.*--pip"):
        build_payload("import huge\nhuge.X[:1]", {}, job="j")


CELL = """from mypkg import twice
import torch
import torch.distributed as dist
y = net(torch.ones(1, 2)).detach()
{"rank0": twice(dist.get_world_size()), "scaled": mymodels.scale(2), "net": type(net).__name__}
"""


@pytest.mark.slow
def test_the_helper_module_runs_on_local_workers_that_do_not_have_it(
    notebook_dir: Path, tmp_path: Path
) -> None:
    from jupyter_disttrain.service import JobService
    from jupyter_disttrain.spec import JobSpec

    mymodels = importlib.import_module("mymodels")
    namespace = {"net": mymodels.Net(), "mymodels": mymodels}
    service = JobService(launch_mode="exec")  # fresh interpreters: nothing inherited
    plan = service.plan(JobSpec("local-mods", nodes=1, nproc=2), CELL, namespace)
    assert "mypkg (local module" in str(plan), str(plan)
    job = service.run(plan)
    try:
        assert job.result(timeout=180) == {"rank0": 4, "scaled": 6, "net": "Net"}, job.logs()
    finally:
        job.stop()


@pytest.mark.slow
def test_the_helper_module_runs_on_emulated_pods(
    notebook_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_disttrain.service import JobService
    from jupyter_disttrain.spec import JobSpec
    from tests.k8s_emulator.emulator import Emulator
    from tests.k8s_emulator.podnet import pod_interface

    mymodels = importlib.import_module("mymodels")
    namespace = {"net": mymodels.Net(), "mymodels": mymodels}
    env = {"GLOO_SOCKET_IFNAME": pod_interface()}
    with Emulator(env=env) as cluster:
        monkeypatch.setenv("KUBECONFIG", str(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
        service = JobService()
        spec = JobSpec("k8s-mods", nodes=2, nproc=1, backend="kubernetes")
        plan = service.plan(spec, CELL, namespace)
        assert "mymodels (local module," in plan.payload.describe()
        job = service.run(plan)
        assert job.result(timeout=180) == {"rank0": 4, "scaled": 6, "net": "Net"}, job.logs()
