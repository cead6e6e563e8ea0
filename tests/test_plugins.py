"""Registries of named plugins over entry points, with in-process registrations."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jupyter_disttrain.backends import registry
from jupyter_disttrain.backends.base import BackendError
from jupyter_disttrain.backends.local import LocalBackend
from jupyter_disttrain.plugins import BACKENDS, FRAMEWORKS, Registry, UnknownPlugin
from jupyter_disttrain.spec import JobSpec, SpecError


class NearbyBackend(LocalBackend):
    """A backend added from outside the package (the local one under another name)."""


def test_the_builtins_come_from_the_packages_entry_points() -> None:
    assert BACKENDS.names() == ("local", "kubernetes")
    assert FRAMEWORKS.names() == ("pytorch", "jax", "tensorflow")
    assert registry.backend_class("local") is LocalBackend


def test_a_registered_backend_is_a_valid_spec_backend() -> None:
    with pytest.raises(SpecError, match=r"unknown --backend 'nearby'; choose one of: local, kub"):
        JobSpec("j", backend="nearby").with_()
    with pytest.raises(BackendError, match=r"unknown backend 'nearby'; available: local, kub"):
        registry.backend_class("nearby")
    registry.register("nearby", NearbyBackend)
    try:
        assert registry.names() == ("local", "kubernetes", "nearby")
        assert JobSpec("j", backend="nearby").with_().backend == "nearby"
        assert isinstance(registry.get_backend("nearby"), NearbyBackend)
    finally:
        registry.unregister("nearby")
    assert "nearby" not in registry.names()


def test_a_registration_must_be_what_its_kind_is() -> None:
    registry.register("not-a-backend", "jupyter_disttrain.spec:JobSpec")
    try:
        with pytest.raises(BackendError, match=r"'not-a-backend' is registered as .*not a Backend"):
            registry.backend_class("not-a-backend")
    finally:
        registry.unregister("not-a-backend")
    with pytest.raises(ValueError, match="'module:attribute'"):
        BACKENDS.register("x", "no-colon")
    with pytest.raises(ValueError, match="non-empty word"):
        BACKENDS.register(" x", LocalBackend)


def test_entry_points_are_read_again_when_sys_path_changes(tmp_path: Path) -> None:
    group = "jupyter_disttrain.test_plugins"
    things = Registry(group, "thing", default="first")
    with pytest.raises(UnknownPlugin, match=f"no thing is registered: .*{group!r}.*reinstall"):
        things.names()
    info = tmp_path / "things-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: things\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{group}]\nsecond = jupyter_disttrain.spec:MAX_NODES\nfirst = json:dumps\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        assert things.names() == ("first", "second")  # the default first, whatever the order
        assert things.load("second") == 1024 and things.known("first")
        with pytest.raises(UnknownPlugin, match="unknown thing 'third'; registered: first, second"):
            things.load("third")
    finally:
        sys.path.remove(str(tmp_path))
    assert not things.known("second")
