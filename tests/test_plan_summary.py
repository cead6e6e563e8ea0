"""A cell's --dry-run of a Kubernetes job: a summary, the full manifest folded."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.plan_summary import manifest_summary
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """An emulated cluster; the default kubeconfig points at it."""
    with Emulator() as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.write_kubeconfig(tmp_path / "kubeconfig")))
        yield emulator


@pytest.fixture
def local_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """``mymodels``, a module beside the notebook."""
    (tmp_path / "mymodels.py").write_text("def net():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import mymodels

    yield mymodels
    sys.modules.pop("mymodels", None)


def test_summary_names_objects_scale_image_resources_and_captures(
    cluster: Emulator, local_module: types.ModuleType
) -> None:
    spec = JobSpec("k8s-summary", nodes=2, nproc=2, backend="kubernetes")
    payload = build_payload(
        "m = mymodels.net()\nx = lr * 2", {"mymodels": local_module, "lr": 0.1}, job=spec.name
    )
    plan = KubernetesBackend().plan(spec, payload)
    summary = manifest_summary(plan)
    assert summary is not None
    lines = summary.lines()
    assert lines[0].startswith("k8s-summary: dry run on kubernetes (namespace ")
    assert lines[0].endswith("2 node(s) x 2 process(es) = 4 rank(s)")
    assert "objects: Secret/k8s-summary-payload, PyTorchJob/k8s-summary" in lines
    images = [line for line in lines if "image " in line]
    assert [line.split(":")[0] for line in images] == ["Master", "Worker"]
    assert all("pytorch/pytorch" in line for line in images)
    assert any(line.startswith("  mymodels: local module, its source travels") for line in lines)
    assert "  lr: float (" in "\n".join(lines)
    assert lines[-2].startswith("the cluster will be asked to: create Secret k8s-summary-payload")
    text = repr(summary)
    assert len(text) < 2000 and "base64" not in text and "apiVersion" not in text
    page = summary._repr_html_()
    assert "<details><summary>full manifest" in page and "apiVersion: kubeflow.org/v1" in page
    # a local plan has no cluster objects: it keeps its own text
    from jupyter_disttrain.backends.local import LocalBackend

    local = LocalBackend().plan(JobSpec("loc", nproc=1), build_payload("1", {}, job="loc"))
    assert manifest_summary(local) is None


def test_the_magic_shows_the_summary_not_the_yaml(
    cluster: Emulator, capsys: pytest.CaptureFixture[str]
) -> None:
    ip = InteractiveShell.instance()
    assert ip.extension_manager is not None
    ip.extension_manager.load_extension("jupyter_disttrain")
    ip.run_cell_magic("distrain", "--backend kubernetes --nodes 2 --nproc 1 --dry-run", "x = 1")
    out = capsys.readouterr().out
    assert "dry run on kubernetes" in out and "objects: Secret/" in out
    assert "apiVersion" not in out and len(out) < 3000
