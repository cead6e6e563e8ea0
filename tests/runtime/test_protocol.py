"""Rank 0's ``relayed`` lines: many other ranks' frequent lines in one signed line."""

from __future__ import annotations

import json
import random

import pytest

from jupyter_disttrain.runtime import jobkey
from jupyter_disttrain.runtime.protocol import (
    PREFIX,
    RELAYED_CHARS,
    decode,
    encode,
    is_quiet,
    metric_step,
    nests_deeper,
    relayed,
    signed_body,
)
from tests.signing import KEY, line

SIGNER = jobkey.Signer(KEY)


def bodies(written: str) -> list[dict[str, object]]:
    """The lines a ``relayed`` line carries: its bodies, or its metric columns' entries as
    the metric lines they stand for."""
    body = signed_body(written, SIGNER)
    assert body is not None, written
    outer = json.loads(body)
    assert ("lines" in outer) != ("metrics" in outer), outer  # one or the other
    if "lines" in outer:
        return list(outer["lines"])
    columns = outer["metrics"]
    assert list(columns) == ["rank", "t", "step", "values"], columns
    return [
        {"v": 1, "kind": "metric", "rank": rank, "t": t, "step": step, "values": values}
        for rank, t, step, values in zip(*columns.values(), strict=True)
    ]


def body_text(sent: str) -> str:
    return sent[len(PREFIX) : sent.rfind(" ")]


def test_a_run_of_metrics_is_one_signed_line_of_columns_holding_each_lines_texts() -> None:
    sent = [line("metric", rank, step=4, values={"loss": 0.25}) for rank in range(1, 9)]
    sent.append(line("metric", 2, step=-5, values={"loss": float("nan"), "lr": 1e-30}))
    [written] = relayed(sent, SIGNER, t=1.0e9)
    outer = json.loads(signed_body(written, SIGNER) or "null")
    assert (outer["kind"], outer["rank"], outer["t"], outer["quiet"]) == ("relayed", 0, 1e9, False)
    assert [json.dumps(b, separators=(",", ":")) for b in bodies(written)] == [
        body_text(s) for s in sent
    ]
    assert len(written) < sum(len(s) for s in sent) / 2  # the envelope of each is not repeated


def test_a_metric_line_of_another_shape_is_carried_as_its_body_in_its_place() -> None:
    """A metric with fields besides ``step`` and ``values``, or nested values, cannot be
    columns: it is carried as it was, and the order of the lines is kept."""
    plain = [line("metric", r, step=1, values={"loss": 1.0}) for r in (1, 2, 3)]
    extra = line("metric", 4, step=1, values={"loss": 1.0}, note="warm-up")
    nested = line("metric", 5, step=1, values={"loss": {"a": 1.0}})
    written = relayed([plain[0], extra, nested, plain[1], plain[2]], SIGNER)
    assert [list(json.loads(signed_body(w, SIGNER) or ""))[-1] for w in written] == [
        "metrics",
        "lines",
        "metrics",
    ]
    assert [b["rank"] for w in written for b in bodies(w)] == [1, 4, 5, 2, 3]
    assert bodies(written[1]) == [json.loads(body_text(extra)), json.loads(body_text(nested))]


def test_other_kinds_stay_their_own_lines_and_the_order_is_kept() -> None:
    metric = [line("metric", r, step=1, values={"loss": 1.0}) for r in (1, 2)]
    error = line("error", 3, type="ValueError", message="bad row", traceback="")
    hello = line("hello", 4, world_size=8, local_rank=0, node_rank=1)
    later = line("progress", 1, step=1, total=10)
    written = relayed([*metric, error, hello, later], SIGNER)
    assert written[1:3] == [error, hello]
    assert [b["rank"] for b in bodies(written[0])] == [1, 2]
    assert [b["kind"] for b in bodies(written[3])] == ["progress"]
    assert len(written) == 4


def test_quiet_lines_share_a_line_marked_quiet_never_one_with_loud_lines() -> None:
    """Between two lines written as they came, the loud lines go first, then the quiet ones:
    resource samples among the metrics do not cut them into many short lines."""
    quiet = [line("resources", r, cpu_pct=50.0, rss_bytes=1 << 20) for r in (1, 2)]
    loud = [line("metric", r, step=1, values={"loss": 1.0}) for r in (3, 4)]
    error = line("error", 5, type="ValueError", message="x", traceback="")
    sent = [quiet[0], loud[0], quiet[1], loud[1], error, quiet[0], loud[0]]
    written = relayed(sent, SIGNER)
    assert [is_quiet(w.encode()) for w in written[:2]] == [False, True]
    assert [len(bodies(w)) for w in written[:2]] == [2, 2]
    assert written[2] == error  # written where it came
    assert [is_quiet(w.encode()) for w in written[3:]] == [False, True]
    assert [b["rank"] for w in written[:2] for b in bodies(w)] == [3, 4, 1, 2]


def test_lines_are_cut_below_the_container_runtimes_split() -> None:
    values = {"loss": 0.5, "lr": 1e-3}
    for sent in (
        [line("metric", r % 8, step=r, values=values) for r in range(2000)],
        [line("progress", r % 8, step=r, total=4000) for r in range(900)],
    ):
        written = relayed(sent, SIGNER)
        assert len(written) > 1
        assert all(len(w) < 16 * 1024 for w in written)
        assert all(len(signed_body(w, SIGNER) or "") <= RELAYED_CHARS + 200 for w in written)
        assert [b["step"] for w in written for b in bodies(w)] == list(range(len(sent)))


def test_a_long_or_unsigned_line_is_written_as_it_came() -> None:
    long = line("metric", 1, step=1, values={f"m{i}": 1.0 for i in range(600)})
    unsigned = line("metric", 2, step=1, values={"loss": 1.0}).rsplit(" ", 1)[0]
    printed = "plain text"
    assert relayed([long, unsigned, printed], SIGNER) == [long, unsigned, printed]


def depth(value: object) -> int:
    """How deep ``value`` nests arrays and objects (0 for a scalar)."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@pytest.mark.parametrize("seed", range(40))
def test_nests_deeper_says_what_the_depth_is(seed: int) -> None:
    rng = random.Random(seed)

    def build(level: int) -> object:
        if level == 0 or rng.random() < 0.15:
            return rng.choice([1, 'a]}[{\\"', None, 2.5])
        items = [build(level - 1)] + [build(rng.randint(0, 2)) for _ in range(rng.randint(0, 2))]
        return items if rng.random() < 0.5 else {f"k{i}": item for i, item in enumerate(items)}

    value = build(rng.randint(1, 45))
    assert nests_deeper(value, 32) == (depth(value) > 32), depth(value)
    assert nests_deeper(json.loads("[" * 33 + "]" * 33)) and not nests_deeper([] * 32)
    assert nests_deeper([[[]]], 2) and not nests_deeper([[], {"a": 1}], 2)
    assert not nests_deeper(7, 0) and nests_deeper({}, 0)


@pytest.mark.parametrize("levels", [33, 900, 100_000])
def test_a_body_nested_too_deep_is_refused_with_its_reason(levels: int) -> None:
    """Deeper than the limit, or than the decoder can go: the same reason, never a raise."""
    fields, why = decode('{"v":1,"x":' + "[" * levels + "]" * levels + "}")
    assert fields is None and why == "the line's body nests deeper than 32 levels"
    assert decode('{"v":1,"x":' + "[" * 31 + "]" * 31 + "}")[0] is not None


def test_metric_step_reads_a_metric_lines_rank_and_step_without_decoding_it() -> None:
    signed = encode("metric", 3, sign_with=KEY, step=7, values={"loss": 1.0})
    assert metric_step(signed) == (3, 7)
    assert metric_step(encode("metric", 0, step=-1, values={})) == (0, -1)
    assert metric_step(encode("progress", 3, step=7, total=9)) is None
    assert metric_step("[rank 3] " + signed) is None  # a line as rank 0 reads it
