from __future__ import annotations

from jupyter_disttrain.units import duration, format_bytes


def test_format_bytes() -> None:
    assert format_bytes(10) == "10 B"
    assert format_bytes(1536) == "1.5 KB"
    assert format_bytes(3 * 1024 * 1024) == "3.0 MB"
    assert format_bytes(5 * 1024**4) == "5120.0 GB"


def test_duration() -> None:
    assert duration(4.25) == "4.2s"
    assert duration(185) == "3m05s"
    assert duration(2 * 3600 + 7 * 60 + 3) == "2h07m"
