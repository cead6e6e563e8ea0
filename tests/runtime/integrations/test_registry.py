"""The autolog registry: choosing integrations, versions, attaching on import, never failing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from jupyter_disttrain import plugins
from jupyter_disttrain.runtime import integrations as autolog
from jupyter_disttrain.runtime import report
from jupyter_disttrain.spec import SpecError, autolog_value


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty registry state, the finder removed again afterwards."""
    for name, value in (
        ("_active", {}),
        ("_waiting", {}),
        ("_attached", set()),
        ("_warned", set()),
        ("_installed", False),
    ):
        monkeypatch.setattr(autolog, name, value)
    before = list(sys.meta_path)
    yield
    sys.meta_path[:] = before


def test_the_variable_chooses_all_none_or_names() -> None:
    assert autolog.chosen(None) is None and autolog.chosen("all") is None
    assert autolog.chosen("0") == set() and autolog.chosen("off") == set()
    assert autolog.chosen("lightning, hf") == {"lightning", "hf"}


def test_versions_are_known_in_their_range_only() -> None:
    assert autolog.known("4.57.1", (4, 40), (6, 0)) and autolog.known("5.24.0", (4, 40), (6, 0))
    assert not autolog.known("6.0.0.dev0", (4, 40), (6, 0))
    assert not autolog.known("4.39.3", (4, 40), (6, 0)) and not autolog.known("", (1, 0), (2, 0))


def test_the_builtins_are_entry_points_and_the_spec_checks_names() -> None:
    assert set(autolog.BUILTIN) <= set(plugins.INTEGRATIONS.names())
    assert autolog.targets()["hf"] == autolog.BUILTIN["hf"]
    assert autolog_value(" HF,lightning ") == "hf,lightning"
    assert autolog_value("0") == "off" and autolog_value("") == "all"
    with pytest.raises(SpecError, match=r"no integration for 'xgboost'.*0 for none"):
        autolog_value("hf,xgboost")


def _library(tmp_path: Path, name: str, version: str) -> None:
    (tmp_path / f"{name}.py").write_text(f"__version__ = {version!r}\nseen = []\n")


def test_an_integration_attaches_when_its_module_is_imported(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _library(tmp_path, "distrain_fake_lib", "1.2.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    attached: list[ModuleType] = []
    fake = autolog.Integration(
        "fake", "distrain_fake_lib", ("distrain_fake_lib",), (1, 0), (2, 0), attached.append
    )
    monkeypatch.setattr(autolog, "load", lambda target: fake)
    monkeypatch.setattr(autolog, "targets", lambda: {"fake": "x:y"})  # not the installed ones
    assert autolog.install({autolog.ENV: "all"}) == ["fake"] and attached == []
    import distrain_fake_lib  # type: ignore[import-not-found]

    assert attached == [distrain_fake_lib] and autolog.active("fake")
    assert distrain_fake_lib.__loader__.__class__.__name__ != "_Loader"  # its own loader again
    sys.modules.pop("distrain_fake_lib")


def test_an_unknown_version_or_a_failing_attach_warns_once(
    fresh: None, capsys: pytest.CaptureFixture[str]
) -> None:
    module = ModuleType("distrain_old_lib")
    module.__version__ = "0.1"  # type: ignore[attr-defined]

    def broken(module: ModuleType) -> None:
        raise RuntimeError("no Trainer here")

    old = autolog.Integration("old", "oldlib", ("distrain_old_lib",), (1, 0), (2, 0), broken)
    assert not autolog.attach(old, module) and not autolog.attach(old, module)
    err = capsys.readouterr().err
    assert (
        err.count("oldlib 0.1 is not a version the old integration knows (1.0 to below 2.0)") == 1
    )
    module.__version__ = "1.5"  # type: ignore[attr-defined]
    other = autolog.Integration("other", "oldlib", (), (1, 0), (2, 0), broken)
    assert not autolog.attach(other, module)
    assert (
        "could not attach to oldlib 1.5: RuntimeError('no Trainer here')" in capsys.readouterr().err
    )


def test_off_installs_nothing(fresh: None) -> None:
    assert autolog.install({autolog.ENV: "0"}) == []
    assert not any(type(f).__name__ == "_Finder" for f in sys.meta_path)


def test_the_cells_own_report_stops_automatic_metrics(
    rank0: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report, "own_metrics", False)
    report.auto_metrics(1, {"loss": 0.5, "name": "x"})
    assert '"values":{"loss":0.5}' in capsys.readouterr().out
    report.report(step=2, acc=1.0)
    report.auto_metrics(3, {"loss": 0.25})
    assert '"loss"' not in capsys.readouterr().out
