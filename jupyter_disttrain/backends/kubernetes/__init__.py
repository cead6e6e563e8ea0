"""The Kubernetes backend: Kubeflow training jobs created, watched and reached on a cluster.

``backend`` is the :class:`KubernetesBackend`. ``kinds/`` holds one module
per Kubeflow kind (``pytorchjob``, ``tfjob``, ``trainjob``; ``operator`` what
the Training Operator v1 kinds share) behind one interface
(:class:`~.kinds.base.KubeflowKind`: manifest builder, status and shape
readers, pod and leader selectors, metrics source) and one table
(:data:`~.kinds.KINDS`). Every other module is kind-neutral: it reads kinds
through that table and interface only, and the frameworks a kind runs, its
container and its limits are data the kind declares.

Adding a kind is one new module under ``kinds/`` and one line in
:data:`~.kinds.KINDS`; ``--kubeflow-api``, listing, attaching, logs,
port-forwarding and ``--dry-run`` then know it.

The rest, by responsibility: ``options`` (``--k8s`` options, parsed; ``syntax``
and ``parts`` their syntax), ``manifests`` (a job's objects in creation order)
over ``template`` (what every kind's objects share), ``images`` (the stock
image), ``staging`` (``--data``), ``pods``, ``labels``, ``script``,
``metrics`` (``--prometheus``), ``yaml`` (rendering); ``client`` (the API
connection), ``attached`` (objects the job owns), ``watch`` (following a job
live), ``status`` and ``phases`` (pods and Events as job events), ``logs``
(a failed job's kept logs), ``records`` (listing rows), ``portforward``
(a socket to rank 0's pod).
"""

from __future__ import annotations

from .backend import KubernetesBackend, KubernetesPlan

__all__ = ["KubernetesBackend", "KubernetesPlan"]
