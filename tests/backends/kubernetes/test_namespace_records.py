"""Rows of every job of the namespace (``--all``) read from job objects of each kind (pure)."""

from __future__ import annotations

from typing import Any

from jupyter_disttrain.backends.kubernetes.kinds import KINDS
from jupyter_disttrain.backends.kubernetes.records import namespace_record
from jupyter_disttrain.backends.kubernetes.reported import read_reported
from jupyter_disttrain.textview import format_namespace_table

KIND = {k.kind: k for k in KINDS}


def trainjob(name: str, labels: dict[str, str], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": "team",
            "labels": labels,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 3}},
        "status": status,
    }


def test_a_foreign_trainjob_row_carries_its_reported_progress() -> None:
    status = {
        "conditions": [],
        "trainerStatus": {
            "progressPercentage": 45,
            "estimatedRemainingSeconds": 795,
            "metrics": [{"name": "loss", "value": "0.2347"}, {"name": "phase", "value": "eval"}],
            "lastUpdatedTime": "2026-01-01T00:01:00Z",
        },
    }
    row = namespace_record(trainjob("sdk", {"app": "x"}, status), KIND["TrainJob"])
    assert row.nodes == 3 and row.owner == "team"
    assert row.facts.foreign is True and row.facts.workload == "TrainJob"
    assert (row.facts.progress, row.facts.eta) == (45, 795)
    assert row.facts.reported_metrics == {"loss": 0.2347}
    assert "foreign" not in row.extra and "progress" not in row.extra  # facts are typed
    reported = KIND["TrainJob"].reported(trainjob("sdk", {}, status))
    assert reported is not None and reported.metrics == {"loss": 0.2347}  # text is not drawn


def test_this_tools_jobs_and_v1_kinds_are_rows_too() -> None:
    mine = trainjob("tj", {"app.kubernetes.io/managed-by": "jupyter-disttrain"}, {})
    row = namespace_record(mine, KIND["TrainJob"])
    assert row.facts.foreign is False and row.facts.progress is None
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "pipeline-step",
            "namespace": "team",
            "labels": {"app.kubernetes.io/managed-by": "kfp"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
        "status": {"conditions": [{"type": "Running", "status": "True"}]},
    }
    other = namespace_record(pytorchjob, KIND["PyTorchJob"])
    assert other.facts.started_by == "kfp" and other.facts.foreign is True
    assert other.state == "Running" and other.nodes == 4 and other.facts.progress is None
    table = format_namespace_table([row, other]).splitlines()
    assert table[1].split()[:4] == ["tj", "TrainJob", "Pending", "-"]
    assert table[2].split()[1:4] == ["PyTorchJob", "Running", "-"] and table[2].endswith("kfp")


def test_what_is_not_of_the_documented_shape_is_left_out() -> None:
    assert read_reported(None) is None and read_reported({}) is None
    metrics = [{"name": "", "value": "1"}, "x", {"name": "nan", "value": "nan"}]
    odd = read_reported(
        {"progressPercentage": 150, "estimatedRemainingSeconds": -1, "metrics": metrics}
    )
    assert odd is not None and (odd.percent, odd.eta, odd.metrics) == (None, None, {})
