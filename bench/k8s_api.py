"""Kubernetes API cost of monitoring a 64-worker job to completion.

The same PyTorchJob (1 Master + 63 Workers, each pod printing metric lines
for a few seconds; no torch) runs on the project's Kubernetes API emulator
(tests/k8s_emulator) three times, each followed by one client:

* jupyter_disttrain's Kubernetes backend (``attach``: watches on the job, its
  pods and Warning events, plus rank 0's log stream);
* the ``kubeflow-training`` SDK's ``TrainingClient``: ``wait_for_job_conditions``
  until Running (its ``get_job_logs`` skips pods that are not running yet),
  then ``get_job_logs(follow=True)`` for the master, or for every pod
  (``is_master=False``), beside ``wait_for_job_conditions`` until Succeeded.

The emulator counts API requests and the peak of concurrent long-lived
responses (watches and log follows) and TCP connections. ``python
bench/k8s_api.py`` prints a table and rewrites the "Kubernetes API" section of
BENCHMARKS.md.

``--trainjob`` measures the same for a 64-node Kubeflow Trainer v2 TrainJob
(emulator with ``apis=("trainer",)``), against the Kubeflow SDK's
``TrainerClient`` (``kubeflow`` package): ``wait_for_job_status`` and
``get_job_logs(follow=True)``, which reads node 0. It also counts how many
ranks' metrics each client ends up with. The workers are printers (64 torch
processes do not fit this machine); in jupyter_disttrain's run node 0 also
prints the other ranks' lines, as the runtime's relay does (tested for real
with torch in ``tests/backends/test_kubernetes_trainjob.py``), and in the
SDK's run every node prints only its own, as a job without the relay does.
It rewrites the "Kubernetes API: TrainJob" section.

``--namespace`` measures following 10 TrainJobs another tool started (the
sidebar's namespace section) against polling their list and against a
dashboard per job; it rewrites the "Kubernetes API: following a namespace"
section.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kubernetes import client as k8s  # noqa: E402
from results import write_section  # noqa: E402

from jupyter_disttrain.backends.kubernetes import KubernetesBackend  # noqa: E402
from jupyter_disttrain.payload import build_payload  # noqa: E402
from jupyter_disttrain.service import attach  # noqa: E402
from jupyter_disttrain.spec import JobSpec  # noqa: E402
from tests.k8s_emulator.emulator import Emulator  # noqa: E402

NODES = 64
STEPS = 50
PRINTER = (
    "import json, os, time\n"
    "import hashlib, hmac\n"
    "key = open(os.environ['DISTRAIN_KEY_FILE'], 'rb').read()  # the job key, as a rank signs\n"
    "def signed(body):\n"
    "    text = json.dumps(body)\n"
    "    return text + ' ' + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()\n"
    "rank = int(os.environ.get('RANK', '0'))\n"
    "for step in range({steps}):\n"
    "    line = {{'v': 1, 'kind': 'metric', 'rank': rank, 't': time.time(), 'step': step,\n"
    "            'values': {{'loss': 1.0 / (step + 1)}}}}\n"
    "    print(f'[rank {{rank}}] ##distrain ' + signed(line), flush=True)\n"
    "    time.sleep(0.5)\n"
    "print(f'[rank {{rank}}] done', flush=True)\n"
)


def create_printing_job(emulator: Emulator, name: str) -> None:
    """Our manifests for a 64-node job, with each pod's command replaced by a printer."""
    spec = JobSpec(name, nodes=NODES, backend="kubernetes")
    objs = KubernetesBackend().objects(spec, build_payload("1", {}, job=name))
    payload_obj, job = objs
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        container = replica["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-c", PRINTER.format(steps=STEPS)]
        container.pop("args", None)
    api = emulator.api_client()
    k8s.CoreV1Api(api).create_namespaced_secret("default", payload_obj)
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", job
    )
    api.close()


def follow_with_disttrain(name: str) -> None:
    job = attach(name, KubernetesBackend())
    state = job.wait(timeout=600)
    assert state == "Succeeded", (state, job.reason)
    assert len(job.metrics()) >= STEPS


def follow_with_sdk(name: str, kubeconfig: str, all_pods: bool) -> None:
    from kubeflow.training import TrainingClient

    sdk = TrainingClient(config_file=kubeconfig, namespace="default")
    # get_job_logs skips pods that are not running yet, so wait for Running first.
    sdk.wait_for_job_conditions(
        name, expected_conditions={"Running", "Succeeded"}, wait_timeout=600
    )
    logs = threading.Thread(
        target=sdk.get_job_logs,
        kwargs={"name": name, "follow": True, "is_master": not all_pods},
        daemon=True,
    )
    logs.start()
    sdk.wait_for_job_conditions(name, expected_conditions={"Succeeded"}, wait_timeout=600)
    logs.join(60)


def measure(label: str, follow: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, Emulator() as emulator:
        kubeconfig = str(emulator.write_kubeconfig(Path(tmp) / "kubeconfig"))
        import os

        os.environ["KUBECONFIG"] = kubeconfig
        name = "bench-" + label.split()[0].lower().replace("_", "-")
        create_printing_job(emulator, name)
        emulator.reset_stats()
        t0 = time.monotonic()
        follow(name)
        seconds = time.monotonic() - t0
        stats = emulator.stats()
        return {
            "label": label,
            "requests": stats.total,
            "non_stream": stats.total - stats.streams.opened,
            "streams_peak": stats.streams.peak,
            "connections_peak": stats.connections.peak,
            "seconds": seconds,
            "by_kind": dict(sorted(stats.requests.items())),
        }


RELAYING_PRINTER = (
    "import json, os, time\n"
    "import hashlib, hmac\n"
    "key = open(os.environ['DISTRAIN_KEY_FILE'], 'rb').read()  # the job key, as a rank signs\n"
    "def signed(body):\n"
    "    text = json.dumps(body)\n"
    "    return text + ' ' + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()\n"
    "node = int(os.environ.get('PET_NODE_RANK', '0'))\n"
    "for step in range({steps}):\n"
    "    for rank in (range({nodes}) if (node == 0 and {relay}) else [node]):\n"
    "        line = {{'v': 1, 'kind': 'metric', 'rank': rank, 't': time.time() + rank * 1e-6,\n"
    "                'step': step, 'values': {{'loss': 1.0 / (step + 1)}}}}\n"
    "        print(f'[rank {{node}}] ##distrain ' + signed(line), flush=True)\n"
    "    time.sleep(0.5)\n"
    "if node == 0:  # rank 0's value, as a worker reports it\n"
    "    end = {{'v': 1, 'kind': 'result', 'rank': 0, 't': time.time(),\n"
    "           'encoding': 'cloudpickle+base64', 'data': 'gAVLAS4='}}\n"
    "    print('[rank 0] ##distrain ' + signed(end), flush=True)\n"
)


def create_printing_trainjob(emulator: Emulator, name: str, relay: bool) -> None:
    """Our TrainJob for 64 nodes, with the trainer command replaced by a printer."""
    spec = JobSpec(name, nodes=NODES, backend="kubernetes", options=(("kubeflow_api", "trainjob"),))
    payload_obj, job = KubernetesBackend().objects(spec, build_payload("1", {}, job=name))
    code = RELAYING_PRINTER.format(steps=STEPS, nodes=NODES, relay=relay)
    job["spec"]["trainer"]["command"] = ["python", "-c", code]
    api = emulator.api_client()
    k8s.CoreV1Api(api).create_namespaced_secret("default", payload_obj)
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", job
    )
    api.close()


def follow_trainjob_with_disttrain(name: str) -> int:
    job = attach(name, KubernetesBackend())
    state = job.wait(timeout=600)
    assert state == "Succeeded", (state, job.reason)
    return len({row["rank"] for row in job.metrics()})


def follow_trainjob_with_sdk(name: str, kubeconfig: str) -> int:
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    sdk = TrainerClient(KubernetesBackendConfig(config_file=kubeconfig, namespace="default"))
    sdk.wait_for_job_status(name, status={"Running", "Complete"}, timeout=600)
    ranks: set[int] = set()

    def read() -> None:
        for line in sdk.get_job_logs(name, follow=True):
            if "##distrain " in line:
                ranks.add(int(line.split('"rank": ')[1].split(",")[0]))

    logs = threading.Thread(target=read, daemon=True)
    logs.start()
    sdk.wait_for_job_status(name, status={"Complete"}, timeout=600)
    logs.join(60)
    return len(ranks)


def measure_trainjob(label: str, relay: bool, follow: Callable[[str], int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, Emulator(apis=("trainer",)) as emulator:
        import os

        os.environ["KUBECONFIG"] = str(emulator.write_kubeconfig(Path(tmp) / "kubeconfig"))
        name = "bench-tj-" + label.split()[0].lower().replace("_", "-")
        create_printing_trainjob(emulator, name, relay)
        emulator.reset_stats()
        t0 = time.monotonic()
        ranks = follow(name)
        seconds = time.monotonic() - t0
        stats = emulator.stats()
        return {
            "label": label,
            "requests": stats.total,
            "non_stream": stats.total - stats.streams.opened,
            "streams_peak": stats.streams.peak,
            "connections_peak": stats.connections.peak,
            "seconds": seconds,
            "ranks": ranks,
            "by_kind": dict(sorted(stats.requests.items())),
        }


def requests_table(
    runs: list[dict[str, Any]], last: str, cell: Callable[[dict[str, Any]], str]
) -> str:
    """The Markdown table of measured runs (each run's requests by kind printed as it goes);
    the last column is headed ``last`` and filled by ``cell``."""
    rows = [
        "| client | API requests | of them one-shot | peak long-lived responses | "
        f"peak TCP connections | wall s | {last} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rows.append(
            f"| {r['label']} | {r['requests']} | {r['non_stream']} | {r['streams_peak']} | "
            f"{r['connections_peak']} | {r['seconds']:.1f} | {cell(r)} |"
        )
        print(r["label"], r["by_kind"])
    return "\n".join(rows)


def trainjob_main(write: bool) -> int:
    runs = [
        measure_trainjob("jupyter_disttrain", True, follow_trainjob_with_disttrain),
        measure_trainjob(
            "TrainerClient (kubeflow SDK)",
            False,
            lambda n: follow_trainjob_with_sdk(n, _kubeconfig()),
        ),
    ]
    table = requests_table(runs, "ranks' metrics seen", lambda r: f"{r['ranks']} of {NODES}")
    print(table)
    if write:
        body = (
            f"`python bench/k8s_api.py --trainjob`, {time.strftime('%Y-%m-%d')}: one TrainJob "
            f"of {NODES} nodes on the `torch-distributed` runtime (Kubeflow Trainer v2.3.0 as "
            f"the emulator plays it), each node printing {STEPS} metric lines over about "
            f"{STEPS // 2} s, followed to its end. jupyter_disttrain watches the TrainJob, its "
            "pods and Warning events and follows node 0's log, where the runtime's relay puts "
            "every rank's lines; the SDK polls the TrainJob (`wait_for_job_status`, every 2 s) "
            "and follows node 0's log (`get_job_logs(follow=True)`), so it sees node 0's "
            "output only.\n\n" + table + "\n\n"
            "What each ships: the SDK's `CustomTrainer(func)` sends `inspect.getsource(func)` "
            "as the container's command text: notebook globals and imports outside the "
            "function do not travel, and the code is visible in the TrainJob. "
            "jupyter_disttrain pickles the cell with the notebook values it uses into a "
            "ConfigMap (or Secret) owned by the TrainJob; the command is fixed "
            "(`python -m torch.distributed.run --module jupyter_disttrain.runtime.worker ...`)."
        )
        write_section(ROOT / "BENCHMARKS.md", "Kubernetes API: TrainJob", body)
    return 0


FOREIGN_JOBS = 10
FOREIGN_STEPS = 12
POLL_SECONDS = 2.0
FOREIGN_MANIFEST = ROOT / "tests" / "data" / "kubeflow_custom_trainer.yaml"


def create_foreign_trainjobs(emulator: Emulator) -> list[str]:
    """Ten SDK-style TrainJobs (one node each, reporting progress every 2 s for ~24 s)."""
    import yaml

    base = yaml.safe_load(FOREIGN_MANIFEST.read_text())
    api = emulator.api_client()
    names = []
    for index in range(FOREIGN_JOBS):
        job = yaml.safe_load(yaml.safe_dump(base))
        job["metadata"]["name"] = f"sdk-job-{index}"
        job["spec"]["trainer"]["numNodes"] = 1
        job["spec"]["trainer"]["env"] = [
            {"name": "STEPS", "value": str(FOREIGN_STEPS)},
            {"name": "STEP_SECONDS", "value": "2"},
        ]
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", job
        )
        names.append(job["metadata"]["name"])
    api.close()
    return names


def poll_until_done(poll: Callable[[], dict[str, int | None]], names: list[str]) -> int:
    """Call ``poll`` (name -> progress %) every POLL_SECONDS until every job shows 100; the
    number of distinct progress values seen."""
    seen: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        progress = poll()
        seen |= {(n, p) for n, p in progress.items() if p is not None}
        if all(progress.get(n) == 100 for n in names):
            break
        time.sleep(POLL_SECONDS)
    return len(seen)


def sidebar_disttrain(names: list[str]) -> int:
    from jupyter_disttrain.server.manager import JobManager

    manager = JobManager(backends=lambda: [KubernetesBackend()])
    try:
        return poll_until_done(
            lambda: {j["name"]: j["progress"] for j in manager.namespace()["jobs"]}, names
        )
    finally:
        manager.close()


def sidebar_kubectl_style(names: list[str]) -> int:
    """What a page polling the TrainJob list does (``kubectl get trainjobs`` every 2 s)."""
    api = k8s.ApiClient(k8s.Configuration.get_default_copy())
    from kubernetes import config

    config.load_kube_config(_kubeconfig(), client_configuration=api.configuration)
    custom = k8s.CustomObjectsApi(api)

    def poll() -> dict[str, int | None]:
        items = custom.list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs"
        )["items"]
        return {
            i["metadata"]["name"]: ((i.get("status") or {}).get("trainerStatus") or {}).get(
                "progressPercentage"
            )
            for i in items
        }

    try:
        return poll_until_done(poll, names)
    finally:
        api.close()


def sidebar_per_job(names: list[str]) -> int:
    """Following each job as a dashboard of its own does (one watch per job)."""
    jobs = [attach(name, KubernetesBackend()) for name in names]
    for job in jobs:
        job.wait(timeout=300)
    return sum(len([r for r in job.metrics() if r["rank"] == 0]) for job in jobs)


def namespace_main(write: bool) -> int:
    runs = []
    clients = [
        ("jupyter_disttrain sidebar (namespace section)", sidebar_disttrain),
        ("polling the TrainJob list every 2 s", sidebar_kubectl_style),
        ("one dashboard per job (%distrain_attach each)", sidebar_per_job),
    ]
    for label, follow in clients:
        with (
            tempfile.TemporaryDirectory() as tmp,
            Emulator(apis=("trainer",), trainer_status=True) as emulator,
        ):
            import os

            os.environ["KUBECONFIG"] = str(emulator.write_kubeconfig(Path(tmp) / "kubeconfig"))
            names = create_foreign_trainjobs(emulator)
            emulator.reset_stats()
            t0 = time.monotonic()
            seen = follow(names)
            stats = emulator.stats()
            runs.append(
                {
                    "label": label,
                    "requests": stats.total,
                    "non_stream": stats.total - stats.streams.opened,
                    "streams_peak": stats.streams.peak,
                    "connections_peak": stats.connections.peak,
                    "seconds": time.monotonic() - t0,
                    "seen": seen,
                    "by_kind": dict(sorted(stats.requests.items())),
                }
            )
    table = requests_table(runs, "progress reports seen", lambda r: str(r["seen"]))
    print(table)
    if write:
        body = (
            f"`python bench/k8s_api.py --namespace`, {time.strftime('%Y-%m-%d')}: "
            f"{FOREIGN_JOBS} TrainJobs another tool started (Kubeflow SDK-style `CustomTrainer` "
            f"manifests, one node each), each posting its progress into `trainerStatus` every "
            f"2 s for {FOREIGN_STEPS} steps, followed until every one shows 100 %, polling "
            f"every {POLL_SECONDS:g} s (the sidebar's pace while it is shown). The namespace "
            "section lists once, then keeps one watch per served kind (here TrainJobs only: "
            "the emulator serves no v1 kinds) and answers every poll from it; polling the list "
            "costs one request a poll; a dashboard per job holds three watches and a log "
            "stream each.\n\n" + table
        )
        write_section(ROOT / "BENCHMARKS.md", "Kubernetes API: following a namespace", body)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument("--trainjob", action="store_true", help="the TrainJob comparison")
    parser.add_argument(
        "--namespace", action="store_true", help="following 10 foreign TrainJobs in the sidebar"
    )
    args = parser.parse_args()
    if args.namespace:
        return namespace_main(not args.no_write)
    if args.trainjob:
        return trainjob_main(not args.no_write)
    runs = [
        measure("jupyter_disttrain", follow_with_disttrain),
        measure(
            "TrainingClient (master logs)",
            lambda n: follow_with_sdk(n, _kubeconfig(), all_pods=False),
        ),
        measure(
            "TrainingClient (all pods' logs)",
            lambda n: follow_with_sdk(n, _kubeconfig(), all_pods=True),
        ),
    ]
    rows = [
        "| client | API requests | of them one-shot | peak long-lived responses | "
        "peak TCP connections | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        rows.append(
            f"| {r['label']} | {r['requests']} | {r['non_stream']} | {r['streams_peak']} | "
            f"{r['connections_peak']} | {r['seconds']:.1f} |"
        )
        print(r["label"], r["by_kind"])
    table = "\n".join(rows)
    print(table)
    if not args.no_write:
        body = (
            f"`python bench/k8s_api.py`, {time.strftime('%Y-%m-%d')}: monitoring one PyTorchJob "
            f"of {NODES} pods (1 Master + {NODES - 1} Workers, each printing {STEPS} metric lines "
            f"over about {STEPS // 2} s) to completion on the Kubernetes API emulator, counted "
            "by the "
            "emulator. The SDK polls the job every 15 s (`wait_for_job_conditions`) and opens "
            "one log stream per pod it follows; jupyter_disttrain watches and follows rank 0 "
            "only, whatever the number of workers.\n\n" + table
        )
        write_section(ROOT / "BENCHMARKS.md", "Kubernetes API", body)
    return 0


def _kubeconfig() -> str:
    import os

    return os.environ["KUBECONFIG"]


if __name__ == "__main__":
    sys.exit(main())
