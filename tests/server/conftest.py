"""Each server test gets its own job home."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def job_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ``DISTRAIN_HOME`` and no kubeconfig (only the local backend is configured)."""
    home = tmp_path / "home"
    monkeypatch.setenv("DISTRAIN_HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    yield home


from pytest_jupyter.jupyter_server import *  # noqa: E402, F403 (jp_fetch and its fixtures)


@pytest.fixture
def jp_server_config(job_home: Path) -> dict[str, object]:
    """A test server with this package's server extension enabled."""
    return {"ServerApp": {"jpserver_extensions": {"jupyter_disttrain.server": True}}}
