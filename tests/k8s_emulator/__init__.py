"""A Kubernetes API emulator on 127.0.0.1, for testing the Kubernetes backend.

It serves the API subset the backend uses (Kubeflow ``PyTorchJob``/``TFJob``,
or with ``Emulator(apis=("trainer",))`` Kubeflow Trainer v2's ``TrainJob``
and runtimes with JobSets and batch Jobs; pods and their logs, ConfigMaps,
Secrets, Services, Events, watches), plays the Training Operator (v1.9) or
Trainer v2.3.0 with the JobSet and Job controllers and Kueue, and the kubelet
(pod containers run as local process groups), and injects faults on demand.
``README.md`` here documents the API and, under "Where the emulator differs
from a real cluster", what it does differently: mount paths, Service hosts
and ports are rewritten so that all pods share one host; no scheduling,
resources, images, init containers, v1 admission webhooks or TLS.
"""

from .emulator import Emulator
from .stats import Gauge, Stats

__all__ = ["Emulator", "Gauge", "Stats"]
