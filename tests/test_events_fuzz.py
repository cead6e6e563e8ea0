"""Any line at all: ``parse_line`` never raises, costs time linear in the line, keeps no memory.

A seeded generator (the same lines every run, in a few seconds) of random bytes,
mutated real lines, non-ASCII look-alikes, lone surrogates, deep JSON and huge
numbers, each with a signature that is valid, foreign or missing. Every line
must come back as an event: its kind when it is the job's own signed line,
else a ``log`` event holding the text, with the reason when it looked like
a control line.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable

from jupyter_disttrain import events as ev
from jupyter_disttrain.runtime import jobkey
from jupyter_disttrain.runtime.protocol import PREFIX
from tests.signing import KEY, line, trust

LINES_PER_KIND = 1500
FOREIGN = jobkey.new_key()
REAL = [
    line("done", 1, seconds=1.0),
    line("metric", 0, step=3, values={"loss": 0.5, "acc": 0.9}),
    line("hello", 1, local_rank=1, world_size=4, node_rank=0, host="h", pid=9),
    line("error", 1, type="ValueError", message="bad", traceback="Traceback ..."),
]


def signed(body: str, key: bytes = KEY) -> str:
    return f"{PREFIX}{body} {jobkey.sign(key, body.encode('utf-8', 'surrogatepass'))}"


def random_bytes(rng: random.Random) -> str:
    raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
    return raw.decode("utf-8", rng.choice(["replace", "surrogateescape", "ignore"]))


def mutated(rng: random.Random) -> str:
    chars = list(rng.choice(REAL))
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(chars))
        chars[at] = chr(rng.choice([rng.randint(0, 127), rng.randint(128, 0xD7FF)]))
    return "".join(chars)


def look_alike(rng: random.Random) -> str:
    filler = rng.choice(["é", "ü", "语", "\u0660", "\U0001f3d6"])
    return 'row: ##distrain {"v":1,"kind":"done","rank":1,"seconds":1} ' + filler * 64


def surrogates(rng: random.Random) -> str:
    lone = chr(rng.randint(0xD800, 0xDFFF))
    body = f'{{"v":1,"kind":"done","rank":1,"t":1,"seconds":1,"x":"{lone}"}}'
    ending = rng.choice(["a" * 64, lone * 64, jobkey.sign(KEY, b"x")])
    return f"{PREFIX}{body} {ending}"


def deep(rng: random.Random) -> str:
    depth = rng.randint(33, 200_000)
    inner = "[" * depth + "]" * depth
    body = f'{{"v":1,"kind":"metric","rank":0,"t":1,"step":1,"values":{{"x":{inner}}}}}'
    return signed(body, rng.choice([KEY, FOREIGN]))


def huge_number(rng: random.Random) -> str:
    number = rng.choice(["9" * rng.randint(400, 20_000), "1e999", "-1e400", "1" + "0" * 5000])
    body = f'{{"v":1,"kind":"metric","rank":0,"t":1,"step":{number},"values":{{}}}}'
    return signed(body)


GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "random bytes": random_bytes,
    "mutated real lines": mutated,
    "non-ASCII look-alikes": look_alike,
    "lone surrogates": surrogates,
    "deep JSON": deep,
    "huge numbers": huge_number,
}


def test_no_line_raises_and_every_line_is_an_event() -> None:
    rng = random.Random(20261128)
    seen: Counter[str] = Counter()
    believed: Counter[str] = Counter()
    job = trust(nodes=2, nproc=2)
    for what, make in GENERATORS.items():
        for _ in range(LINES_PER_KIND):
            text = make(rng)
            event = ev.parse_line(text, rng.choice([0, 1, None]), trust=job)
            seen[what] += 1
            if event.kind == "log":
                assert event.get("text") == text.rstrip("\r\n"), (what, text[:200])
                if PREFIX in text:
                    assert event.get("rejected"), (what, text[:200])
            else:
                believed[what] += 1
    assert all(seen[what] == LINES_PER_KIND for what in GENERATORS), seen
    # only real lines that survived their mutations may be believed; nothing made up is
    assert set(believed) <= {"mutated real lines"}, believed


def test_a_deep_signed_look_alike_is_named_as_such() -> None:
    body = '{"v":1,"kind":"metric","rank":0,"t":1,"step":1,"values":' + "[" * 50_000
    event = ev.parse_line(signed(body + "]" * 50_000 + "}"), 0, trust=trust())
    assert event.kind == "log" and "deeper than" in event.get("rejected"), event


def test_the_reported_look_alike_is_log_text() -> None:
    text = 'row: ##distrain {"v":1,"kind":"done","rank":1,"seconds":1} ' + "é" * 64
    event = ev.parse_line(text, 1, trust=trust(nodes=1, nproc=2))
    assert event.kind == "log" and event.get("text") == text
    assert "not signed" in event.get("rejected")


def _seconds(text: str) -> float:
    """The least CPU time this thread took to read ``text``, of five readings: time the
    thread spent preempted, or other threads spent working, does not count."""
    job = trust()
    least = float("inf")
    for _ in range(5):
        started = time.thread_time()
        ev.parse_line(text, 0, trust=job)
        least = min(least, time.thread_time() - started)
    return least


def test_time_grows_linearly_with_the_line_and_memory_stays_flat() -> None:
    body = '{"v":1,"kind":"metric","rank":0,"t":1,"step":1,"values":'
    small, large = signed(body + "[]," * 20_000), signed(body + "[]," * 320_000)
    ratio = _seconds(large) / max(_seconds(small), 1e-6)
    # sixteen times the line: 16-35 times the time (the larger one outgrows the CPU's
    # caches), never squared (256 times)
    assert ratio < 100, ratio
    lines = [small, look_alike(random.Random(1)) * 20_000, deep(random.Random(2))]
    job = trust()
    tracemalloc.start(FRAMES)
    try:
        for text in lines:  # the first reading of each kind of line (caches, compiled patterns)
            ev.parse_line(text, 0, trust=job)
        before, base = held_by_this_test(), tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in range(5):
            for text in lines:
                ev.parse_line(text, 0, trust=job)
        after, peak = held_by_this_test(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert after - before < 64 * 1024, (before, after)  # nothing kept per line
    assert peak - base < 8 * max(len(t) for t in lines), peak  # a few copies of a line at most


#: Frames kept per traced allocation: the parser's calls go 8 deep, so this test's frame is
#: in every traceback of what they allocate.
FRAMES = 64


def held_by_this_test() -> int:
    """Bytes traced now whose allocation ran through this test's frame: its parsing, not
    what other threads of the test process (pytest-xdist's messaging, threads of the
    package an earlier test left running) allocate meanwhile."""
    ours = tracemalloc.Filter(True, __file__, all_frames=True)
    kept = tracemalloc.take_snapshot().filter_traces([ours])
    return sum(stat.size for stat in kept.statistics("filename"))
