"""Rank 0's writer of the TrainJob's ``trainerStatus``: what it posts, when it stays silent,
and that a failing endpoint never reaches training (one warning)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import report, trainer_status
from tests.signing import KEY, key_file, line


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRAIN_KEY_FILE", str(key_file(tmp_path)))


def test_nothing_happens_without_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (trainer_status.ENV_URL, trainer_status.ENV_CA, trainer_status.ENV_TOKEN):
        monkeypatch.delenv(name, raising=False)
    assert trainer_status.endpoint() is None
    assert trainer_status.start(0) is None
    monkeypatch.setenv(trainer_status.ENV_URL, "https://status.example:10443/x")
    assert trainer_status.endpoint() is None  # the CA and token files are part of it
    env = {trainer_status.ENV_URL: "u", trainer_status.ENV_CA: "c", trainer_status.ENV_TOKEN: "t"}
    assert trainer_status.endpoint(env) == ("u", "c", "t")


def test_rank_0s_signed_lines_make_the_status(keyed: None) -> None:
    progress = trainer_status.Progress()
    report.add_observer(progress.observe)
    try:
        report.emit_as(0, "progress", step=2, total=10)  # rank 0's own, as it signed them
        time.sleep(0.05)
        report.emit_as(0, "progress", step=4, total=10)
        forged = line("metric", 0, step=3, values={"loss": 5.0}).rsplit(" ", 1)[0] + " " + "0" * 64
        relayed = [
            line("metric", 0, step=3, values={"loss": 0.123456789, "acc": 1}),
            line("metric", 1, step=3, values={"loss": 9.0}),  # another rank's
            forged,  # printed text that looks like a line
            "##distrain not json",
        ]
        report.write_lines(relayed, echo=False)
        status = progress.status()
        assert status["progressPercentage"] == 40
        assert 0 < status["estimatedRemainingSeconds"] < 60
        assert status["metrics"] == [
            {"name": "step", "value": "3"},
            {"name": "loss", "value": "0.123457"},
            {"name": "acc", "value": "1"},
        ]
        assert status["lastUpdatedTime"].endswith("Z") and not progress.changed
        report.emit_as(0, "progress", step=10, total=10)
        final = progress.status()
        assert (final["progressPercentage"], final["estimatedRemainingSeconds"]) == (100, 0)
        assert KEY  # the lines above were signed with the job's key
    finally:
        report._observers.remove(progress.observe)


def test_a_failing_endpoint_warns_once_and_never_raises(
    keyed: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = tmp_path / "token"
    token.write_text("t")
    writer = trainer_status.Writer(
        f"https://127.0.0.1:{port}/status", "/nonexistent/ca.crt", str(token), every=60
    )
    writer.start()
    report.emit_as(0, "progress", step=1, total=4)
    assert writer.progress.changed
    assert writer.post() is False
    assert writer.progress.changed  # kept for the next interval
    writer.stop()  # the final post fails too: still one warning, no exception
    err = capsys.readouterr().err
    assert err.count("cannot write the TrainJob's trainerStatus") == 1, err
    assert writer.failures == 2 and writer.posts == 0
    report._observers.remove(writer.progress.observe)
