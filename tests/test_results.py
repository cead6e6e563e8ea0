from __future__ import annotations

import base64

import cloudpickle
import pytest

from jupyter_disttrain.results import RemoteError, decode_result, recreate_exception


def test_builtin_exception_keeps_type_rank_and_traceback() -> None:
    exc = recreate_exception(
        {
            "type": "ValueError",
            "module": "builtins",
            "message": "bad batch",
            "traceback": "Traceback...\nValueError: bad batch",
        },
        rank=1,
    )
    assert isinstance(exc, ValueError)
    assert str(exc).startswith("[rank 1] bad batch")
    assert "Remote traceback (rank 1)" in str(exc)
    assert exc.remote_rank == 1  # type: ignore[attr-defined]


def test_user_exception_type_travels_by_value() -> None:
    class DataError(Exception):
        pass

    fields = {
        "type": "DataError",
        "module": "__main__",
        "message": "m",
        "traceback": "t",
        "type_pickle": base64.b64encode(cloudpickle.dumps(DataError)).decode(),
    }
    exc = recreate_exception(fields, rank=2)
    assert type(exc).__name__ == "DataError" and "[rank 2] m" in str(exc)


def test_unknown_type_becomes_remote_error() -> None:
    exc = recreate_exception({"type": "Gone", "module": "no.such.module", "message": "x"}, 0)
    assert isinstance(exc, RemoteError)
    assert "Gone: x" in str(exc)


def test_decode_result() -> None:
    data = base64.b64encode(cloudpickle.dumps({"a": 1})).decode()
    assert decode_result({"encoding": "cloudpickle+base64", "data": data}) == {"a": 1}
    with pytest.raises(ValueError, match="unknown result encoding"):
        decode_result({"encoding": "zip"})
