"""A short soak: consecutive jobs (some failing, some stopped) leak no fds or threads."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.serial  # it measures this process's memory, fds and threads: alone
def test_consecutive_jobs_leave_nothing_behind() -> None:
    spec = importlib.util.spec_from_file_location("soak", REPO / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = soak  # its dataclasses look their module up
    spec.loader.exec_module(soak)
    result = soak.soak(10, prefix="test-soak")
    assert result.states.count("Failed") == 3 and result.states.count("Stopped") == 2
    rss, fds, threads = result.growth(warmup=5)
    assert not result.left, result.left
    assert fds <= 2, [(s.job, s.fds) for s in result.samples]
    assert threads <= 1, [(s.job, s.threads) for s in result.samples]
    assert rss < 64 * 2**20, [(s.job, s.rss) for s in result.samples]
