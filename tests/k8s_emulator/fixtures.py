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

As a plugin (``pytest_plugins`` in ``tests/conftest.py``) it also adds an
"emulator state" section (:func:`~.describe.describe`) to the report of every
failing test that started an emulator, however it failed, and a header line
saying which network the emulator's pods have in this run (their own network
namespaces, or this host's loopback and why).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import describe, podnet
from .emulator import Emulator


def pytest_report_header() -> str:
    reason = podnet.availability()
    if reason is None:
        return f"k8s emulator network: pods in their own network namespaces ({podnet.POD_CIDR})"
    return f"k8s emulator network: pods on this host's loopback, names rewritten ({reason})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if call.when == "setup":
        return
    if report.failed:
        shown = call.excinfo is not None and "--- emulator " in str(call.excinfo.value)
        text = "" if shown else describe.reports()  # the failure's message showed it
        if text:
            report.sections.append(("emulator state", text))
    if call.when == "teardown":
        describe.forget()


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
