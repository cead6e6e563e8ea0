"""pytest fixtures for the Kubernetes API emulator.

Import them into a ``conftest.py``::

    from tests.k8s_emulator.fixtures import k8s_api_client, k8s_emulator, k8s_kubeconfig

* ``k8s_emulator``: a started :class:`Emulator` for one test; stopped (every
  pod process killed) afterwards.
* ``k8s_trainer_emulator``: the same with Kubeflow Trainer v2 (and Kueue)
  instead of the Training Operator v1: ``Emulator(apis=("trainer",))``.
* ``k8s_api_client``: a ``kubernetes.client.ApiClient`` bound to it.
* ``k8s_kubeconfig``: the path of a kubeconfig naming it (for ``kubectl`` and
  ``kubernetes.config.load_kube_config``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .emulator import Emulator


@pytest.fixture
def k8s_emulator() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def k8s_trainer_emulator() -> Iterator[Emulator]:
    with Emulator(apis=("trainer",)) as emulator:
        yield emulator


@pytest.fixture
def k8s_api_client(k8s_emulator: Emulator) -> Iterator[Any]:
    client = k8s_emulator.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def k8s_kubeconfig(k8s_emulator: Emulator, tmp_path: Path) -> Path:
    return k8s_emulator.write_kubeconfig(tmp_path / "kubeconfig")
