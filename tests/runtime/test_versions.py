"""The package versions a worker reports: the ones its payload names, when imported."""

from __future__ import annotations

import json
import pickle
import platform
from collections.abc import Iterator

import pytest

from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.runtime import versions


@pytest.fixture(autouse=True)
def reset() -> Iterator[None]:
    yield
    versions.use({})


def test_a_payload_names_its_frameworks_package() -> None:
    envelope = pickle.loads(build_payload("1", {}, job="v", framework="tensorflow").data)
    assert envelope["versions_of"] == ["tensorflow"] and "torch" not in envelope


def test_reported_versions_are_the_payloads_imported_packages() -> None:
    assert versions.reported() == {"python": platform.python_version()}
    versions.use({"versions_of": ["json", "not_imported_pkg"]})
    assert versions.reported() == {"python": platform.python_version(), "json": json.__version__}
    assert list(versions.reported(["json", "not_imported_pkg"])) == ["python", "json"]
