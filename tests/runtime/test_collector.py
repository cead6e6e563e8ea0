"""Heavy imports run without the garbage collector's passes; a job's cell always runs
with the collector on, and a forked rank starts with the launcher's imports frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_disttrain.runtime import collector
from jupyter_disttrain.spec import JobSpec
from tests.backends.local.test_backend import job_logs, run_job
from tests.runtime.test_worker import run_one_rank


@pytest.fixture
def collecting() -> Iterator[None]:
    """The collector on before the test and again after it, whatever the test does."""
    gc.enable()
    yield
    gc.enable()


@pytest.mark.usefixtures("collecting")
def test_the_collector_is_off_inside_and_back_on_after_even_on_an_error() -> None:
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer one's pause
    assert gc.isenabled()
    with pytest.raises(KeyError), collector.paused():
        raise KeyError("an import failed")
    assert gc.isenabled()


@pytest.mark.usefixtures("collecting")
def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Nothing frozen during the test; what the test process froze after collecting
    (tests/conftest.py) is frozen again after it."""
    gc.unfreeze()
    yield
    gc.freeze()


@pytest.mark.usefixtures("collecting", "unfrozen")
def test_what_a_frozen_block_made_is_frozen_unless_it_raised() -> None:
    with pytest.raises(KeyError), collector.frozen():
        assert not gc.isenabled()
        raise KeyError("an import failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0  # nothing frozen of a failed import
    with collector.frozen():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() >= len(made)


CELL = (
    "import gc\n"
    "report(step=0, collecting=float(gc.isenabled()), frozen=float(gc.get_freeze_count()))\n"
    "print('collecting', gc.isenabled())\n"
)


def test_a_worker_started_afresh_runs_the_cell_with_the_collector_on(tmp_path: Path) -> None:
    log = run_one_rank(tmp_path, CELL, {}, "collector-exec")
    assert "collecting True" in log, log


def test_a_forked_rank_runs_the_cell_with_the_collector_on_and_the_imports_frozen() -> None:
    sink, run = run_job(JobSpec("collector-fork", nodes=1, nproc=2, timeout=120), CELL)
    assert sink.final().get("state") == "Succeeded", job_logs(run)
    values = [dict(e.get("values")) for e in sink.kinds("metric")]
    assert len(values) == 2, job_logs(run)
    for rank in values:
        assert rank["collecting"] == 1.0, values
        # torch and its peers, imported by the launcher before it forked
        assert rank["frozen"] > 100_000, values
