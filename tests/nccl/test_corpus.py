"""The reader on the log corpus: the tune split read right, the whole corpus honest.

Held-out logs are only measured (``bench/nccl_corpus.py``, BENCHMARKS.md),
never asserted one by one: rules are written against the tune split.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.nccl_corpus import CORPUS, evaluate, read_index
from jupyter_disttrain.nccl import summarize

INDEX = read_index()
TUNE = sorted(name for name, f in INDEX.items() if f["split"] == "tune")
PROBLEM = re.compile(r"WARN|error|Error|ERROR|failed|Failed|FAILED|refused|timed out|Timeout")


def read(name: str) -> tuple[str, object]:
    text = (CORPUS / name).read_text(encoding="utf-8")
    return text, summarize(text.splitlines())


def test_the_corpus_is_large_sourced_and_split_by_its_rule() -> None:
    logs = sorted(p.name for p in Path(CORPUS).glob("*.log"))
    assert len(logs) >= 40 and sorted(INDEX) == logs
    text = (CORPUS / "INDEX.md").read_text(encoding="utf-8")
    for name, fields in INDEX.items():
        assert fields["split"] == ("heldout" if int(name[:2]) % 3 == 0 else "tune"), name
        assert re.search(rf"## {re.escape(name)}\nsource: \S+#\d+ \(https://github\.com/", text)
    assert {f["failure"] for f in INDEX.values()} >= {
        "none",
        "connection",
        "ib",
        "cuda-oom",
        "timeout",
        "shm",
        "other",
    }


@pytest.mark.parametrize("name", sorted(INDEX))
def test_no_log_with_a_warning_or_an_error_is_called_nothing_to_fix(name: str) -> None:
    text, s = read(name)
    if PROBLEM.search(text):
        assert "nothing to fix" not in s.diagnosis, (name, s.diagnosis)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", TUNE)
def test_tune_split_failure_class(name: str) -> None:
    _, s = read(name)
    assert s.failure == INDEX[name]["failure"], (name, s.diagnosis)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", [n for n in TUNE if INDEX[n]["init_complete"] != "unknown"])
def test_tune_split_init_complete(name: str) -> None:
    _, s = read(name)
    expected = INDEX[name]["init_complete"] == "yes"
    assert s.init_complete is expected, (name, s.diagnosis)  # type: ignore[attr-defined]


def test_the_held_out_split_is_measured() -> None:
    results = evaluate()
    held = results["heldout"]
    assert held["logs"] >= 10 and 0.0 <= held["accuracy"] <= 1.0
