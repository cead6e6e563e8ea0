"""The emulator's fixtures, for its own tests."""

from typing import Any

import pytest

from tests.k8s_emulator.fixtures import k8s_api_client, k8s_emulator, k8s_kubeconfig
from tests.k8s_emulator_test.clusters import Cluster

__all__ = ["cluster", "k8s_api_client", "k8s_emulator", "k8s_kubeconfig"]


@pytest.fixture
def cluster(k8s_api_client: Any) -> Cluster:
    """The client APIs of this test's emulator (test_trainer*.py have a ``cluster`` of their
    own, on an emulator with the Trainer v2 APIs)."""
    return Cluster(k8s_api_client)
