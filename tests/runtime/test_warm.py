"""Libraries a launcher imports ahead for a job: which, where from, and when it must not fork."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import warm
from jupyter_disttrain.runtime.launcher_identity import ENV_SYS_PATH


def test_a_job_gets_the_declared_modules_of_the_libraries_it_imports() -> None:
    assert warm.chosen(["torch", "lightning", "numpy"]) == ["lightning.pytorch"]
    assert warm.chosen(["pytorch_lightning"]) == ["pytorch_lightning"]
    assert warm.chosen(["transformers", "torch"]) == ["transformers.trainer"]
    assert warm.chosen(["torch", "keras", "tensorflow", "accelerate"]) == []


def package(root: Path, name: str, text: str) -> Path:
    """``root/name/__init__.py`` holding ``text``; its real path."""
    (root / name).mkdir(parents=True)
    init = root / name / "__init__.py"
    init.write_text(text)
    return init.resolve()


def job_env(module: str, *path: Path) -> dict[str, str]:
    return {warm.ENV_WARM: module, ENV_SYS_PATH: json.dumps([*map(str, path), *sys.path])}


def test_an_allowed_module_is_imported_once_where_the_jobs_path_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = package(tmp_path / "mine", "warmfake_a", "LOADS = []\nLOADS.append(1)\n")
    other = package(tmp_path / "other", "warmfake_a", "OTHER = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    monkeypatch.delitem(sys.modules, "warmfake_a", raising=False)
    warmed = warm.Warmed(allowed=["warmfake_a"])

    warmed.request(job_env("warmfake_a", tmp_path / "other"))  # the job would import another
    assert "warmfake_a" not in sys.modules and warmed.origins == {}

    same = job_env("warmfake_a,not_allowed_b", tmp_path / "mine")
    warmed.request(same)
    warmed.request(same)
    assert sys.modules["warmfake_a"].LOADS == [1] and "not_allowed_b" not in sys.modules
    assert warmed.origins == {"warmfake_a": str(mine)}
    assert warmed.refusal(same) == ""
    said = warmed.refusal(job_env("", tmp_path / "other"))
    assert said == f"the job imports warmfake_a from {other}, not {mine}; not forking"


def test_a_module_that_fails_to_import_is_said_and_left_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package(tmp_path, "warmfake_bad", "raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    warmed = warm.Warmed(allowed=["warmfake_bad"])
    warmed.request(job_env("warmfake_bad", tmp_path))
    assert warmed.origins == {} and warmed.refusal(job_env("", tmp_path)) == ""
    assert "warmfake_bad not imported ahead: RuntimeError('broken on import')" in (
        capsys.readouterr().err
    )


def test_a_package_imported_in_part_still_refuses_a_job_with_another_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = package(tmp_path / "mine", "warmfake_part", "")
    (mine.parent / "sub.py").write_text("raise ImportError('half way')\n")
    package(tmp_path / "other", "warmfake_part", "")
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    monkeypatch.delitem(sys.modules, "warmfake_part", raising=False)
    warmed = warm.Warmed(allowed=["warmfake_part.sub"])
    warmed.request(job_env("warmfake_part.sub", tmp_path / "mine"))
    assert "warmfake_part" in sys.modules and "warmfake_part.sub" not in sys.modules
    assert "imports warmfake_part from" in warmed.refusal(job_env("", tmp_path / "other"))


def test_a_package_the_library_imports_in_turn_refuses_a_job_with_another_copy_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package(tmp_path / "mine", "warmfake_lib", "import warmfake_dep\n")
    dep = package(tmp_path / "mine", "warmfake_dep", "")
    other = package(tmp_path / "other", "warmfake_dep", "")
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    for name in ("warmfake_lib", "warmfake_dep"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    warmed = warm.Warmed(allowed=["warmfake_lib"])
    asked = job_env("warmfake_lib,not_allowed,warmfake_lib", tmp_path / "mine")
    assert warmed.wanted(asked) == ("warmfake_lib",)
    warmed.request(asked)
    assert warmed.origins["warmfake_dep"] == str(dep)
    said = warmed.refusal(job_env("", tmp_path / "other", tmp_path / "mine"))
    assert said == f"the job imports warmfake_dep from {other}, not {dep}; not forking"
