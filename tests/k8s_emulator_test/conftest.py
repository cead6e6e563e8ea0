"""The emulator's fixtures, for its own tests."""

from tests.k8s_emulator.fixtures import k8s_api_client, k8s_emulator, k8s_kubeconfig

__all__ = ["k8s_api_client", "k8s_emulator", "k8s_kubeconfig"]
