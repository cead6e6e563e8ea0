"""What a rank's log line shows a reader (backends/loglines.py)."""

from __future__ import annotations

from jupyter_disttrain import events as ev
from jupyter_disttrain.backends.loglines import shown_lines
from tests.signing import KEY, line, trust

TRACE = 'Traceback (most recent call last):\n  File "train.py", line 4\nValueError: bad batch\n'


def test_a_signed_error_shows_its_traceback_and_other_control_lines_nothing() -> None:
    job = trust(nodes=1, nproc=2)
    error = line(
        "error", 1, type="ValueError", module="builtins", message="bad batch", traceback=TRACE
    )
    assert shown_lines(error, 1, job) == TRACE.rstrip("\n").splitlines()
    assert shown_lines(line("metric", 1, step=3, values={"loss": 0.5}), 1, job) == []
    assert shown_lines("loss 0.5 at step 3", 1, job) == ["loss 0.5 at step 3"]


def test_an_error_line_not_believed_is_not_shown_as_a_traceback() -> None:
    job = trust(nodes=1, nproc=2)
    error = line("error", 1, type="ValueError", module="builtins", message="m", traceback=TRACE)
    other_key = ev.Trust.of(bytes(reversed(KEY)), 1, 2)
    assert shown_lines(error, 1, other_key) == [error]  # printed text: shown as printed
    assert shown_lines(error, 0, job) == []  # rank 1's error relayed by rank 0: not rank 0's
    own = line("error", 0, type="ValueError", module="builtins", message="m", traceback=TRACE)
    assert shown_lines(own, 1, job) == []  # rank 0's error in rank 1's stream: refused
    assert shown_lines(error, 1, None) == [error]  # a job with no key: every line is text
    beyond = line("error", 5, type="ValueError", module="builtins", message="m", traceback=TRACE)
    assert shown_lines(beyond, 5, job) == []  # rank 5 of a 2-rank job


def test_an_error_without_a_traceback_shows_its_type_and_message() -> None:
    error = line("error", 0, type="KeyError", module="builtins", message="'x'", traceback="")
    assert shown_lines(error, 0, trust(nodes=1, nproc=1)) == ["KeyError: 'x'"]
