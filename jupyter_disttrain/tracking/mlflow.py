"""``--mlflow URI``: the job as an MLflow run.

The run (named after the job, in the experiment ``$MLFLOW_EXPERIMENT_NAME``
or ``Default``) is created when the job's first event arrives and gets:

* params: the job's options (:func:`params`); ``--env`` values are left out
  (they may hold tokens), only their names are logged;
* metrics: rank 0's ``report()`` values under their own names (``loss``),
  every other rank's as ``NAME/rankR`` (``loss/rank1``), with the step and
  the time the rank reported them;
* checkpoints: each one's URI as the tag ``disttrain.checkpoint.step-N``, and
  its files as artifacts under ``checkpoints/step-N`` when this machine can
  read them (a path here, not in a pod);
* the end: status FINISHED (Succeeded), FAILED (Failed) or KILLED (Stopped),
  with the tags ``disttrain.state`` and ``disttrain.reason``.

Written with ``MlflowClient`` (never the fluent API's process-wide active
run), so jobs running side by side are separate runs. A tracking server that
cannot be reached gives one warning and the job goes on without MLflow.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

from ..events import Event
from ..spec import JobSpec
from .sink import Feed, Sink, SinkError

#: MLflow's limits for one ``log_batch`` call.
MAX_METRICS: Final = 1000
MAX_PARAMS: Final = 100
MAX_PARAM_VALUE: Final = 6000
#: Seconds to wait for a tracking server's port before the job goes on without it.
CONNECT_TIMEOUT: Final = 5.0
DEFAULT_EXPERIMENT: Final = "Default"
STATUS: Final = {"Succeeded": "FINISHED", "Failed": "FAILED", "Stopped": "KILLED"}
#: What MLflow accepts in a metric name: letters, digits, ``_ - . : /`` and spaces.
_UNSAFE: Final = re.compile(r"[^\w\-. :/]")


def available() -> bool:
    """True when an MLflow client (``mlflow`` or ``mlflow-skinny``) can be imported here."""
    import importlib.util

    return importlib.util.find_spec("mlflow") is not None


def metric_key(name: str, rank: int) -> str:
    """Rank 0's metric keeps its name; rank R's is ``NAME/rankR``.

    Characters MLflow refuses in a name become ``_`` (``acc@1`` is ``acc_1``).
    """
    name = _UNSAFE.sub("_", name)
    return name if rank == 0 else f"{name}/rank{rank}"


def params(spec: JobSpec) -> dict[str, str]:
    """The job's options as MLflow params (unset options left out; ``--env`` by name only)."""
    out: dict[str, Any] = {
        "nodes": spec.nodes,
        "nproc": spec.nproc,
        "world_size": spec.world_size,
        "backend": spec.backend,
        "framework": spec.framework,
        "dist_backend": spec.dist_backend,
        "max_restarts": spec.max_restarts,
        "timeout": spec.timeout,
        "checkpoint_dir": spec.checkpoint_dir,
        "resume": spec.resume,
        "grace_period": spec.grace_period,
        "hang_after": spec.hang_after,
    }
    if spec.env:
        out["env"] = ",".join(key for key, _ in spec.env)
    options: dict[str, list[str]] = {}
    for key, value in spec.options:
        options.setdefault(key, []).append(value)
    for key, values in options.items():
        out[key] = ",".join(values)
    return {k: str(v)[:MAX_PARAM_VALUE] for k, v in out.items() if v is not None}


def check_reachable(uri: str) -> None:
    """Raise :class:`SinkError` when an ``http(s)`` tracking server's port does not answer."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise SinkError(
            f"cannot reach the tracking server ({why}); start it or fix --mlflow"
        ) from None


class MlflowSink(Sink):
    """Logs one job as an MLflow run at ``uri`` (see the module doc).

    ``paths_here``: a checkpoint path the job reports is a path of this
    machine (its backend's ``checkpoints_on_path``), not of a pod's.
    """

    name = "mlflow"
    flush_every = 2.0

    def __init__(
        self,
        uri: str,
        spec: JobSpec,
        feed: Feed,
        *,
        notebook: str | None = None,
        paths_here: bool = True,
    ) -> None:
        self.uri = uri
        self.spec = spec
        self.notebook = notebook
        self.paths_here = paths_here
        self.run_id: str | None = None
        self._client: Any = None
        self._pending: list[Any] = []
        self._checkpoints: set[str] = set()
        self._reason = ""
        super().__init__(spec.name, feed)

    def describe(self) -> str:
        """The tracking URI."""
        return f"MLflow at {self.uri}"

    # ------------------------------------------------------------------ the run

    def _open(self) -> None:
        check_reachable(self.uri)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        found = client.get_experiment_by_name(name)
        experiment = found.experiment_id if found is not None else client.create_experiment(name)
        tags = {
            "disttrain.job": self.spec.name,
            "disttrain.backend": self.spec.backend,
            "mlflow.user": _user(),
            "mlflow.source.type": "NOTEBOOK" if self.notebook else "LOCAL",
        }
        if self.notebook:
            tags["mlflow.source.name"] = self.notebook
        run = client.create_run(experiment, run_name=self.spec.name, tags=tags)
        self._client, self.run_id = client, run.info.run_id
        items = [Param(k, v) for k, v in params(self.spec).items()]
        for i in range(0, len(items), MAX_PARAMS):
            client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS])

    def handle(self, event: Event) -> None:
        """Queue metrics, log checkpoints, remember why the job is in its state."""
        if self.run_id is None:
            self._open()
        if event.kind == "metric" and event.rank is not None and event.rank >= 0:
            self._metric(event)
        elif event.kind == "checkpoint":
            self._checkpoint(event)
        elif event.kind == "job":
            f = event.job()
            self._reason = str(f.get("message") or f.get("reason") or "")
        if len(self._pending) >= MAX_METRICS:
            self.flush()

    def _metric(self, event: Event) -> None:
        from mlflow.entities import Metric

        f = event.metric()
        step, values = f.get("step"), f.get("values")
        if not isinstance(step, int) or not isinstance(values, dict):
            return
        stamp = int(event.t * 1000)
        assert event.rank is not None
        for name, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._pending.append(
                    Metric(metric_key(str(name), event.rank), float(value), stamp, step)
                )

    def _checkpoint(self, event: Event) -> None:
        f = event.checkpoint()
        uri, step = str(f.get("uri") or ""), f.get("step")
        if not uri or uri in self._checkpoints:
            return
        self._checkpoints.add(uri)
        where = f"step-{step}" if isinstance(step, int) else Path(uri).name
        self._client.set_tag(self.run_id, f"disttrain.checkpoint.{where}", uri)
        path = local_path(uri) if self.paths_here else None
        if path is None:
            return
        if path.is_dir():
            self._client.log_artifacts(self.run_id, str(path), f"checkpoints/{where}")
        elif path.is_file():
            self._client.log_artifact(self.run_id, str(path), f"checkpoints/{where}")

    def flush(self) -> None:
        """Send the queued metrics (in batches MLflow accepts)."""
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), MAX_METRICS):
            self._client.log_batch(self.run_id, metrics=pending[i : i + MAX_METRICS])

    def finish(self, state: str | None) -> None:
        """Send the rest and end the run with the job's status."""
        if self.run_id is None:
            return  # no event arrived: no run was made
        self.flush()
        self._client.set_tag(self.run_id, "disttrain.state", state or "Unknown")
        if self._reason:
            self._client.set_tag(self.run_id, "disttrain.reason", self._reason[:5000])
        self._client.set_terminated(
            self.run_id, STATUS.get(state or "", "KILLED"), end_time=int(time.time() * 1000)
        )


def local_path(uri: str) -> Path | None:
    """The path of a checkpoint URI this machine reads directly (a path or ``file://``)."""
    if uri.startswith("file://"):
        uri = urlparse(uri).path
    elif "://" in uri:
        return None
    path = Path(uri)
    return path if path.exists() and os.access(path, os.R_OK) else None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
