"""What a pod receives beside its image: the worker runtime and the pod's warm launcher."""

from __future__ import annotations

from jupyter_disttrain.backends.kubernetes.podfiles import payload_files
from jupyter_disttrain.payload import build_payload


def test_pods_get_the_worker_runtime_and_the_launcher_that_forks_it() -> None:
    files = payload_files(build_payload("1", {}, job="k8s-files"))
    runtime = {name.rsplit("/", 1)[-1] for name in files if name.startswith("jupyter_disttrain/")}
    assert {"worker.py", "forkclient.py", "jobkey.py"} <= runtime
    assert {"podlaunch.py", "zygote.py", "launcher_identity.py"} <= runtime
    assert {"payload.pkl", "cloudpickle/__init__.py"} <= set(files)
