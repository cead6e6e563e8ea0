from __future__ import annotations

import io
import pickle
import threading
from typing import Any

import cloudpickle
import numpy as np
import pytest

from jupyter_disttrain.payload import CaptureError, build_payload, free_names


def test_free_names_follow_scoping() -> None:
    source = (
        "import os\n"
        "x = helper(CONST)\n"
        "def f(a):\n"
        "    b = a + OTHER\n"
        "    return b + x\n"
        "class K:\n"
        "    y = SCALE\n"
        "[i for i in data]\n"
    )
    names = free_names(source)
    assert names[:2] == ["helper", "CONST"]
    assert set(names) >= {"OTHER", "SCALE", "data"}
    assert not {"os", "x", "a", "b", "f", "K", "i"} & set(names)


def _envelope(payload: Any) -> dict[str, Any]:
    env = pickle.loads(payload.data)
    assert isinstance(env, dict)
    return env


def test_captures_values_functions_classes_and_modules() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = 2

    def scale(v: int) -> int:
        return v * FACTOR  # noqa: F821 - resolved from the namespace below

    ns: dict[str, Any] = {
        "Model": Model,
        "scale": scale,
        "FACTOR": 3,
        "np": np,
        "unused": object(),
        "In": [],
        "_5": 1,
    }
    payload = build_payload("m = Model()\nscale(m.w) + np.int64(1)", ns, job="t")
    env = _envelope(payload)
    assert set(env["globals"]) == {"Model", "scale"}
    assert env["imports"] == {"np": "numpy"}
    loaded = cloudpickle.loads(env["globals"]["Model"])
    assert loaded().w == 2
    desc = payload.describe()
    assert "Model (type" in desc and "np (import numpy)" in desc
    assert env["python"].count(".") == 2


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (threading.Lock(), "lock"),
        ((i for i in range(3)), "generator"),
        (io.BufferedReader(io.BytesIO(b"x")), "cannot be sent"),
    ],
)
def test_unpicklable_capture_names_variable_and_reason(value: Any, needle: str) -> None:
    with pytest.raises(CaptureError) as info:
        build_payload("print(thing)", {"thing": value}, job="t")
    message = str(info.value)
    assert "'thing'" in message and needle in message and "inside the cell" in message


def test_open_file_is_refused(tmp_path: Any) -> None:
    with open(tmp_path / "f.txt", "w") as fh, pytest.raises(CaptureError, match="'fh'"):
        build_payload("fh.write('x')", {"fh": fh}, job="t")


def test_oversized_capture_is_refused_with_advice() -> None:
    big = np.zeros(300_000)
    with pytest.raises(CaptureError, match=r"over the .* limit.*big.*inside the cell"):
        build_payload("big.sum()", {"big": big}, job="t", max_capture_bytes=1_000_000)


@pytest.mark.parametrize(
    ("cell", "needle"),
    [
        ("", "has no code"),
        ("   \n\n", "has no code"),
        ("# comment only\n", "has no code"),
        ("x = (1,\n", "syntax error on line"),
        ("!ls\n", "magics or shell commands"),
        ("%time 1+1\n", "magics or shell commands"),
    ],
)
def test_bad_cells(cell: str, needle: str) -> None:
    with pytest.raises(CaptureError, match=needle):
        build_payload(cell, {}, job="t")
