"""A parser's exit read as its error line (runtime/exits.py), with real argparse."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import traceback

import pytest

from jupyter_disttrain.runtime.exits import parser_error, without_parser_frames


def parse_nothing() -> None:
    parser = argparse.ArgumentParser(prog="multinode.py")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    with contextlib.redirect_stderr(io.StringIO()):
        parser.parse_args([])


def test_argparses_exit_reads_as_its_error_line_and_its_frames_are_cut() -> None:
    with pytest.raises(SystemExit) as raised:
        parse_nothing()
    exc = raised.value
    words = "multinode.py: error: the following arguments are required: total_epochs, save_every"
    assert parser_error(exc) == words
    frames = traceback.extract_tb(without_parser_frames(exc.__traceback__))
    assert frames[-1].name == "parse_nothing" and "parse_args" in (frames[-1].line or "")
    assert not any(frame.filename.endswith("argparse.py") for frame in frames), frames
    assert any(f.filename.endswith("argparse.py") for f in traceback.extract_tb(exc.__traceback__))


@pytest.mark.parametrize("code", [2, "bad data", None, 0])
def test_other_exits_and_errors_are_not_a_parsers(code: object) -> None:
    with pytest.raises(SystemExit) as raised:
        sys.exit(code)
    assert parser_error(raised.value) is None
    tb = raised.value.__traceback__
    assert without_parser_frames(tb) is tb  # no parser frame: unchanged
    assert parser_error(ValueError("x")) is None
