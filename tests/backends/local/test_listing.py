"""Listing local jobs from their state files, whatever those files hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_disttrain.backends.local import LocalBackend, jobdir


def write_state(name: str, state: object) -> None:
    directory = jobdir.job_dir(name)
    jobdir.make_private_dirs(directory)
    jobdir.write_json_atomic(directory / "state.json", state)


def test_partial_and_wrong_state_files_do_not_break_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTRAIN_HOME", str(tmp_path))
    write_state("whole", {"name": "whole", "state": "Succeeded", "nodes": 2, "nproc": 1})
    write_state("starting", {"nodes": 1, "nproc": 1})  # no name or state yet
    write_state("garbled", {"name": "garbled", "nodes": "two", "nproc": 1})
    write_state("listed", ["not", "an", "object"])
    records = {r.name: r for r in LocalBackend().list_jobs()}
    assert sorted(records) == ["starting", "whole"], records
    assert (records["whole"].state, records["whole"].nodes) == ("Succeeded", 2)
    assert records["starting"].state == "Stopped"  # no owner alive: it never started
