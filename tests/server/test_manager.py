"""JobManager without a server: listing, detail from replayed job directories, stop, logs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_disttrain.backends.base import Backend, BackendError, JobNotFound, JobRecord
from jupyter_disttrain.backends.local import LocalBackend, jobdir
from jupyter_disttrain.server.manager import JobManager
from jupyter_disttrain.server.views import JobJSON, job_json, notebook_api_path
from jupyter_disttrain.service import JobService

from .jobdirs import write_job


class Broken(Backend):
    """A backend whose listing fails (or hangs) the way an unreachable cluster does."""

    name = "kubernetes"

    def __init__(self, hang: float = 0.0) -> None:
        self.hang = hang

    def plan(self, spec, payload):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def submit(self, plan, sink):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def attach(self, name, sink):  # type: ignore[no-untyped-def]
        raise BackendError("unreachable")

    def list_jobs(self) -> list[JobRecord]:
        if self.hang:
            time.sleep(self.hang)
        raise BackendError("the cluster rejected the credentials (401 Unauthorized)")

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        raise BackendError("unreachable")

    def stop(self, name: str) -> bool:
        raise BackendError("unreachable")


@pytest.fixture
def manager(job_home: Path) -> Iterator[JobManager]:
    m = JobManager(lambda: [LocalBackend()], root_dir=str(job_home.parent))
    yield m
    m.close()


def settle(read: Callable[[], JobJSON], ok: Callable[[JobJSON], bool]) -> JobJSON:
    """The job once ``ok`` (replays run in the background), failing after 10 s."""
    deadline = time.monotonic() + 10
    job = read()
    while not ok(job) and time.monotonic() < deadline:
        time.sleep(0.05)
        job = read()
    assert ok(job), job
    return job


def test_finished_job_is_rebuilt_from_its_directory(manager: JobManager, job_home: Path) -> None:
    notebook = job_home.parent / "work" / "train.ipynb"
    write_job("done-job", steps=5, notebook=str(notebook))

    listing = manager.list_jobs()
    assert listing["backends"] == [{"name": "local", "ok": True, "error": ""}]
    assert [j["id"] for j in listing["jobs"]] == ["local/done-job"]
    assert listing["running"] == 0
    json.dumps(listing, allow_nan=False)  # what the handler sends

    # replayed in the background: done once the recorded terminal event arrived
    job = settle(lambda: manager.job("local", "done-job"), lambda j: j["elapsed"] == 10.0)
    assert job["state"] == "Succeeded" and job["world_size"] == 4 and not job["can_stop"]
    assert job["step"] == 4
    assert job["notebook"] == "work/train.ipynb" and job["notebook_file"] == str(notebook)
    assert job["metrics"]["loss"] == pytest.approx((0.2 + 1.2 + 2.2 + 3.2) / 4)
    detail = job["detail"]
    assert detail is not None and detail["followed"]
    assert [r["rank"] for r in detail["ranks"]] == [0, 1, 2, 3]
    assert {r["state"] for r in detail["ranks"]} == {"Succeeded"}
    assert [(r["node"], r["local_rank"]) for r in detail["ranks"]] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert detail["ranks"][3]["latest"] == {"loss": pytest.approx(3.2)}
    # /ckpt/done-job is no checkpoint directory: the reported checkpoints are shown
    [ckpt] = detail["checkpoints"]
    assert (ckpt["step"], ckpt["uri"], ckpt["bytes"], ckpt["rank"], ckpt["status"]) == (
        4,
        "/ckpt/done-job/step-4",
        1234,
        0,
        "reported",
    )
    assert detail["metrics"]["loss"]["ranks"] == 4
    json.dumps(job, allow_nan=False)


def test_jobs_are_listed_newest_first_and_followers_follow_recreation(
    manager: JobManager,
) -> None:
    now = time.time()
    write_job("old", created=now - 100, steps=2)
    write_job("new", created=now - 10, steps=3)
    assert [j["name"] for j in manager.list_jobs()["jobs"]] == ["new", "old"]
    settle(lambda: manager.job("local", "old"), lambda j: j["step"] == 1)

    write_job("old", created=now - 5, steps=7)  # a new job under the same name
    assert [j["name"] for j in manager.list_jobs()["jobs"]] == ["old", "new"]
    settle(lambda: manager.job("local", "old"), lambda j: j["step"] == 6)


def test_a_failing_backend_is_an_error_entry(job_home: Path) -> None:
    write_job("survivor")
    manager = JobManager(lambda: [LocalBackend(), Broken()])
    try:
        listing = manager.list_jobs()
        assert [j["name"] for j in listing["jobs"]] == ["survivor"]
        assert listing["backends"][1]["name"] == "kubernetes"
        assert not listing["backends"][1]["ok"]
        assert "401 Unauthorized" in listing["backends"][1]["error"]
        with pytest.raises(BackendError, match="401"):
            manager.job("kubernetes", "anything")
        with pytest.raises(JobNotFound, match="no backend named 'slurm'"):
            manager.job("slurm", "anything")
    finally:
        manager.close()


def test_a_backend_that_does_not_answer_does_not_hold_the_list(job_home: Path) -> None:
    write_job("survivor")
    manager = JobManager(lambda: [LocalBackend(), Broken(hang=3)], list_timeout=0.3)
    try:
        started = time.monotonic()
        listing = manager.list_jobs()
        assert time.monotonic() - started < 2.5  # not the broken backend's 3 s
        assert [j["name"] for j in listing["jobs"]] == ["survivor"]
        assert listing["backends"][1]["error"] == "no answer within 0.3 s"
        listing = manager.list_jobs()  # the slow call is not started again while in flight
        assert listing["backends"][1]["error"] == "no answer within 0.3 s"
    finally:
        manager.close()


def test_logs_of_one_rank_every_rank_and_a_rank_without_output(manager: JobManager) -> None:
    write_job("logs-job", nodes=1, nproc=2, steps=4)
    one = manager.logs("local", "logs-job", rank=1, tail=2)
    assert one["text"].splitlines() == ["rank 1 step 2", "rank 1 step 3"]  # protocol lines hidden
    assert one["ranks"] == [0, 1] and one["message"] == ""
    every = manager.logs("local", "logs-job", rank=None, tail=1)
    assert every["text"].splitlines() == ["[rank 0] rank 0 step 3", "[rank 1] rank 1 step 3"]
    (jobdir.logs_dir(jobdir.job_dir("logs-job")) / "rank-1.log").unlink()
    missing = manager.logs("local", "logs-job", rank=1, tail=10)
    assert missing["text"] == "" and "no log for rank 1" in missing["message"]
    with pytest.raises(JobNotFound):
        manager.logs("local", "nope", rank=None, tail=None)


def test_stop_asks_a_running_job_to_stop(manager: JobManager) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        directory = write_job("runner", state="Running", owner_pid=owner.pid, steps=3)
        listing = manager.list_jobs()
        assert listing["running"] == 1 and listing["jobs"][0]["can_stop"]
        job = settle(lambda: manager.job("local", "runner"), lambda j: j["step"] == 2)
        assert job["elapsed"] > 25  # still running: measured up to now

        result = manager.stop("local", "runner")
        assert result["stopped"] and (directory / "stop").exists()  # the owner ends it
        state = json.loads((directory / "state.json").read_text())
        jobdir.write_json_atomic(directory / "state.json", {**state, "state": "Stopped"})
        assert manager.list_jobs()["running"] == 0
        assert not manager.stop("local", "runner")["stopped"]
    finally:
        owner.kill()
        owner.wait()


def test_a_job_whose_owner_died_shows_stopped(manager: JobManager) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_job("orphan", state="Running", owner_pid=dead.pid, steps=2)
    job = settle(lambda: manager.job("local", "orphan"), lambda j: j["step"] == 1)
    assert job["state"] == "Stopped" and job["reason"] == "its kernel or command exited"
    assert not job["can_stop"]


def test_notebook_paths(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    inside = root / "sub" / "a.ipynb"
    assert notebook_api_path(str(inside), str(root)) == "sub/a.ipynb"
    assert notebook_api_path(str(tmp_path / "elsewhere.ipynb"), str(root)) is None
    assert notebook_api_path(str(inside), None) is None
    assert notebook_api_path("sub/a.ipynb", str(root)) == "sub/a.ipynb"
    assert notebook_api_path("../a.ipynb", str(root)) is None
    assert notebook_api_path("", str(root)) is None


def test_configured_backends_follow_the_kubeconfig(
    job_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert [b.name for b in JobService().configured_backends()] == ["local"]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert [b.name for b in JobService().configured_backends()] == ["local", "kubernetes"]


def test_checkpoints_come_from_the_recorded_directory(
    manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.checkpoints.test_checkpoints import save_steps

    default = write_job("x", steps=5) / "checkpoints"  # the job directory's own folder
    save_steps(default, [2, 4], monkeypatch)
    job = settle(lambda: manager.job("local", "x"), lambda j: j["elapsed"] == 10.0)
    assert job["detail"] is not None
    listed = job["detail"]["checkpoints"]
    assert [(c["step"], c["status"]) for c in listed] == [(2, "ok"), (4, "ok")]
    assert all(c["uri"].startswith(str(default)) for c in listed)

    chosen = tmp_path / "chosen"  # --checkpoint-dir as recorded when the job was submitted
    save_steps(chosen, [7], monkeypatch)
    write_job("y", steps=5, checkpoint_dir=str(chosen))
    job = settle(lambda: manager.job("local", "y"), lambda j: j["elapsed"] == 10.0)
    assert job["detail"] is not None
    assert [(c["step"], c["status"]) for c in job["detail"]["checkpoints"]] == [(7, "ok")]


def test_a_checkpoint_directory_a_line_names_is_not_read(
    manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.checkpoints.test_checkpoints import save_steps

    elsewhere = tmp_path / "elsewhere"  # real checkpoints, but not the job's directory
    save_steps(elsewhere, [1, 2, 3], monkeypatch)
    write_job("z", steps=5, checkpoint_uri=f"{elsewhere}/step-3")
    job = settle(lambda: manager.job("local", "z"), lambda j: j["elapsed"] == 10.0)
    assert job["detail"] is not None
    assert [(c["step"], c["uri"], c["status"]) for c in job["detail"]["checkpoints"]] == [
        (4, f"{elsewhere}/step-3", "reported")
    ]


class Malformed(Backend):
    """A backend (e.g. a plugin) listing one record whose fields are not what they should be."""

    name = "plugin"

    def plan(self, spec, payload):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def submit(self, plan, sink):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def attach(self, name, sink):  # type: ignore[no-untyped-def]
        raise BackendError("not followed")

    def list_jobs(self) -> list[JobRecord]:
        good = JobRecord("good", "plugin", "Succeeded", 1, 1, 1, time.time() - 5, time.time())
        bad = JobRecord("bad", "plugin", "Running", 1, 1, 1, "yesterday")  # type: ignore[arg-type]
        return [good, bad]

    def logs(self, name: str, rank: int | None = None, tail: int | None = None) -> str:
        return ""

    def stop(self, name: str) -> bool:
        return False


def test_a_job_whose_view_fails_is_listed_with_an_error(job_home: Path) -> None:
    write_job("local-ok", steps=2)
    manager = JobManager(lambda: [LocalBackend(), Malformed()])
    try:
        listing = manager.list_jobs()
        json.dumps(listing, allow_nan=False)
        by_id = {j["id"]: j for j in listing["jobs"]}
        assert set(by_id) == {"local/local-ok", "plugin/good", "plugin/bad"}
        assert by_id["plugin/good"]["error"] == "" and by_id["local/local-ok"]["error"] == ""
        assert by_id["plugin/bad"]["error"].startswith("cannot show this job's progress: TypeError")
        assert by_id["plugin/bad"]["state"] == "Running" and by_id["plugin/bad"]["created"] == 0.0
        assert manager.job("plugin", "bad")["error"]  # the detail answers too
    finally:
        manager.close()


def test_the_kernel_knows_its_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_disttrain.magics import notebook_path

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert notebook_path(SimpleNamespace(user_ns={})) is None
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/a.ipynb")
    assert notebook_path(SimpleNamespace(user_ns={})) == "/home/me/a.ipynb"
    shell = SimpleNamespace(user_ns={"__session__": "/home/me/b.ipynb"})
    assert notebook_path(shell) == "/home/me/b.ipynb"


def test_a_session_is_listed_as_one() -> None:
    record = JobRecord("warm", "local", "Running", 4, 2, 2, 100.0, extra={"source": "session"})
    assert job_json(record, None, now=110.0)["source"] == "session"
    assert (
        job_json(JobRecord("cold", "local", "Running", 1, 1, 1, 100.0), None, now=110.0)["source"]
        == "job"
    )


def test_a_session_recorded_under_the_old_label_is_still_one() -> None:
    """Sessions started before the label was named ``source`` carry ``kind=session``."""
    record = JobRecord("warm", "local", "Running", 4, 2, 2, 100.0, extra={"kind": "session"})
    assert job_json(record, None, now=110.0)["source"] == "session"
