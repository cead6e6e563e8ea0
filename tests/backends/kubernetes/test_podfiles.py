"""What a pod receives beside its image: the worker runtime, not the local launcher."""

from __future__ import annotations

from jupyter_disttrain.backends.kubernetes.podfiles import payload_files
from jupyter_disttrain.payload import build_payload


def test_pods_get_the_worker_runtime_but_not_the_local_launchers_modules() -> None:
    files = payload_files(build_payload("1", {}, job="k8s-files"))
    runtime = {name.rsplit("/", 1)[-1] for name in files if name.startswith("jupyter_disttrain/")}
    assert {"worker.py", "forkclient.py", "jobkey.py"} <= runtime
    assert not {"zygote.py", "launcher_identity.py"} & runtime
