"""Failure-class accuracy of the communication-log reader on the log corpus.

``python bench/nccl_corpus.py`` reads every log of ``tests/data/nccl-corpus``
with :func:`jupyter_disttrain.nccl.summarize` and compares the failure class
with the expert reading in its ``INDEX.md``, per split: ``tune`` (the logs
the rules were written against) and ``heldout`` (never looked at while
writing them). ``--show tune`` lists the tune split's misreadings; the
held-out misreadings are counted, not shown, unless ``--show heldout``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "nccl-corpus"
sys.path.insert(0, str(REPO))

from jupyter_disttrain.nccl import summarize  # noqa: E402


def read_index(corpus: Path = CORPUS) -> dict[str, dict[str, Any]]:
    """INDEX.md as {file: {field: value}}."""
    text = (corpus / "INDEX.md").read_text(encoding="utf-8")
    entries: dict[str, dict[str, Any]] = {}
    for name, block in re.findall(r"^## (\S+\.log)\n.*?```yaml\n(.*?)```", text, re.S | re.M):
        fields: dict[str, Any] = {}
        for row in block.splitlines():
            key, sep, rest = row.partition(":")
            if sep and key.strip():
                fields[key.strip()] = rest.strip()
        entries[name] = fields
    return entries


def evaluate(corpus: Path = CORPUS) -> dict[str, Any]:
    """Per split: logs, correct classes, accuracy, and the misreadings (file, expected, got)."""
    results: dict[str, Any] = {}
    for name, fields in sorted(read_index(corpus).items()):
        with open(corpus / name, encoding="utf-8") as fh:
            s = summarize(fh)
        split = results.setdefault(fields["split"], {"logs": 0, "correct": 0, "wrong": []})
        split["logs"] += 1
        if s.failure == fields["failure"]:
            split["correct"] += 1
        else:
            split["wrong"].append((name, fields["failure"], s.failure, s.diagnosis))
    for split in results.values():
        split["accuracy"] = split["correct"] / split["logs"] if split["logs"] else 0.0
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", choices=("tune", "heldout"), action="append", default=[])
    args = parser.parse_args(argv)
    results = evaluate()
    classes = Counter(f["failure"] for f in read_index().values())
    print(f"corpus: {sum(r['logs'] for r in results.values())} logs, classes {dict(classes)}")
    for split in ("tune", "heldout"):
        r = results.get(split, {"logs": 0, "correct": 0, "accuracy": 0.0, "wrong": []})
        print(
            f"{split:8s} {r['correct']:3d}/{r['logs']:<3d} failure class correct "
            f"({100 * r['accuracy']:.0f}%)"
        )
        if split in args.show:
            for name, expected, got, diagnosis in r["wrong"]:
                print(f"  {name}: expected {expected}, read {got}: {diagnosis}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
