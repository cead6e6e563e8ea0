"""The sidebar's JSON: a rank's error that only reports the failing rank's end says so."""

from __future__ import annotations

from jupyter_disttrain.monitor import CauseRow, ErrorRow
from jupyter_disttrain.server.views import error_json
from tests.monitor.test_cause import GLOO_CLOSED


def test_an_error_that_only_reports_the_failing_ranks_end_reads_lost_its_peer() -> None:
    cause = CauseRow(
        rank=1, kind="raised", reason="ValueError: bad batch", consequences=[3], line="rank 1"
    )
    lost = ErrorRow(rank=3, t=2.0, type="RuntimeError", message=GLOO_CLOSED, traceback="")
    own = ErrorRow(rank=1, t=1.0, type="ValueError", message="bad batch", traceback="")
    assert error_json(lost, cause)["peer"] == "lost its peer (rank 1 failed)"
    assert error_json(lost, cause)["message"] == GLOO_CLOSED  # the raw text kept, behind a fold
    assert error_json(own, cause)["peer"] == "" and error_json(lost, None)["peer"] == ""
