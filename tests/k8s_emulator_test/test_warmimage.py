"""A training pod forked from a warm image sees what a pod started cold sees."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jupyter_disttrain import service as jobs
from jupyter_disttrain.backends.kubernetes import KubernetesBackend
from jupyter_disttrain.payload import build_payload
from jupyter_disttrain.spec import JobSpec
from tests.k8s_emulator.emulator import Emulator
from tests.k8s_emulator.podnet import pod_interface

#: What each rank's pod shows of itself: its launcher (the container's first process, the
#: worker's parent), its names, files, paths and streams; rank 0 returns every rank's.
LOOK = textwrap.dedent(
    """
    import os, socket, sys, tempfile, torch.distributed as dist
    def proc(pid, name):
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return [part.decode() for part in f.read().split(b"\\0") if part]
    launcher = os.getppid()
    with open(f"/proc/{launcher}/stat") as f:
        launcher_parent = int(f.read().rsplit(")", 1)[1].split()[1])
    environ = dict(item.split("=", 1) for item in proc(launcher, "environ"))
    with open("/etc/hostname") as f:
        etc_hostname = f.read()
    print("to the pod's log", file=sys.stderr)
    view = {
        "cmdline": proc(launcher, "cmdline"),
        "environ": sorted(k for k in environ if k != "K8S_EMULATOR_CONTAINER_ID"),
        "marked": environ.get("K8S_EMULATOR_CONTAINER_ID", "").count("/"),
        "image": " ".join(proc(launcher_parent, "cmdline")),
        "hostname": socket.gethostname(),
        "etc_hostname": etc_hostname,
        "address": socket.gethostbyname(socket.gethostname()),
        "cwd": os.getcwd(),
        "sys_path": sys.path,
        "argv": sys.argv,
        "flags": tuple(sys.flags),
        "runtime": sys.modules["jupyter_disttrain"].__file__,
        "tmp": tempfile.gettempdir(),
        "leak": "K8S_EMULATOR_TEST_LEAK" in os.environ,
        "stdout_seekable": sys.stdout.seekable(),
        "stderr_errors": sys.stderr.errors,
    }
    views = [None] * dist.get_world_size()
    dist.all_gather_object(views, view)
    views
    """
)


def look(warm: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every rank's view of its pod, from an emulator whose pods start warm or cold."""
    with Emulator(env={"GLOO_SOCKET_IFNAME": pod_interface()}, warm_image=warm) as emulator:
        if emulator.network_mode != "pods":
            pytest.skip("a warm image serves pods on the pod network only")
        config = emulator.write_kubeconfig(tmp_path / f"kubeconfig-{warm}")
        monkeypatch.setenv("KUBECONFIG", str(config))
        job = jobs.submit(
            JobSpec(
                f"look-{'warm' if warm else 'cold'}", backend="kubernetes", nodes=2, timeout=120
            ),
            build_payload(LOOK, {}, job="look"),
            KubernetesBackend(),
        )
        views: list[dict[str, Any]] = job.result(timeout=150)
        return views


def same(view: dict[str, Any]) -> Any:
    """``view`` with the names of the job (``look-warm``, ``look-cold``) and of the emulator's
    folders made the same."""
    text = json.dumps(view).replace("look-warm", "look-*").replace("look-cold", "look-*")
    text = re.sub(r"k8s-emulator-[^/]+/tmp/[0-9a-f]+", "POD-TMP", text)  # the pod's TMPDIR
    return json.loads(re.sub(r"k8s-emulator-[^/]+/pods/[^/]+/", "POD/", text))


def test_a_warm_pod_sees_what_a_cold_pod_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8S_EMULATOR_TEST_LEAK", "1")
    warm, cold = look(True, tmp_path, monkeypatch), look(False, tmp_path, monkeypatch)
    for rank, (hot, fresh) in enumerate(zip(warm, cold, strict=True)):
        assert "k8s_emulator/warmimage.py" in hot.pop("image"), (rank, hot)
        assert "k8s_emulator/warmimage.py" not in fresh.pop("image"), (rank, fresh)
        for view in (hot, fresh):  # each emulator has a /24 and a folder of its own
            assert view.pop("address").startswith("10.244."), view
        assert same(hot) == same(fresh), rank
        assert hot["cmdline"][1:4] == ["-u", "-m", "jupyter_disttrain.runtime.podlaunch"]
        assert hot["runtime"].startswith("/opt/disttrain/payload/"), hot  # the job's own
        assert hot["marked"] == 4 and not hot["leak"] and not hot["stdout_seekable"]
