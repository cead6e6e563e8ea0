"""The communication panel on real NCCL logs and on a gloo job (widgets/comms_panel.py)."""

from __future__ import annotations

from jupyter_disttrain.events import job_event
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.nccl import summarize
from jupyter_disttrain.widgets.comms_panel import CommsPanel

from .dom import parse
from .streams import NCCL_LOGS, T0, hello, log


def fed(name: str, *, parts: int = 1) -> tuple[JobMonitor, CommsPanel, list[str]]:
    """A monitor and panel fed a shared NCCL log as job-wide lines, rendering between parts."""
    text = (NCCL_LOGS / name).read_text(encoding="utf-8").splitlines()
    mon = JobMonitor("n", "kubernetes", 4)
    panel = CommsPanel(mon)
    step = -(-len(text) // parts)
    for start in range(0, len(text), step):
        for i, line in enumerate(text[start : start + step]):
            mon.feed(log(None, T0 + start + i, line))
        panel.render(mon.snapshot())
    return mon, panel, text


def test_cuda_oom_log_is_summarised_and_diagnosed() -> None:
    _, panel, text = fed("09-cuda-oom-p2p-setup.log", parts=3)
    block = parse(panel.summary_html.value).find_all("distrain-comms")[0]
    assert block.attrs["data-backend"] == "nccl"
    assert block.attrs["data-failure"] == "cuda-oom"
    expected = summarize(text)
    diagnosis = block.find_all("distrain-diagnosis")[0].all_text()
    assert diagnosis == expected.diagnosis and "out of GPU memory" in diagnosis
    facts = {
        row.attrs["data-field"]: row.all_text()
        for row in block.find_all(tag="tr")
        if "data-field" in row.attrs
    }
    assert facts["warnings"] == f"warnings{expected.warnings}"
    assert facts["failure"] == "failurecuda-oom"
    assert panel.accordion.get_title(0) == f"Raw NCCL lines ({len(expected.raw_lines)})"
    assert panel.accordion.selected_index is None  # one click away, not in the way
    assert "NCCL WARN Failed to CUDA calloc 6291456 bytes" in panel.raw.value


def test_healthy_ib_init_reads_the_same_as_the_cli_summary() -> None:
    _, panel, text = fed("01-ib-roce-init-complete.log")
    expected = summarize(text)
    block = parse(panel.summary_html.value).find_all("distrain-comms")[0]
    assert block.attrs["data-failure"] == "none"
    assert expected.nccl_version is not None and expected.nccl_version in panel.summary_html.value
    assert "complete on every rank" in panel.summary_html.value


def test_gloo_jobs_say_so_and_show_the_c10d_lines() -> None:
    mon = JobMonitor("g", "local", 2)
    panel = CommsPanel(mon)
    for r in range(2):
        mon.feed(hello(r, T0, backend="gloo", world=2))
    mon.feed(log(0, T0 + 1, "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number: 1"))
    mon.feed(log(1, T0 + 1, "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number: 1"))
    mon.feed(log(0, T0 + 2, "epoch 0 done"))
    panel.render(mon.snapshot())
    block = parse(panel.summary_html.value).find_all("distrain-comms")[0]
    assert block.attrs["data-backend"] == "gloo"
    assert "NCCL is not in use" in block.all_text()
    assert panel.accordion.get_title(0) == "c10d / gloo lines (2)"
    assert "Rank 1 is connected" in panel.raw.value and "epoch 0" not in panel.raw.value


def test_a_failed_jax_job_gets_no_nccl_advice() -> None:
    mon = JobMonitor("j", "local", 2)
    panel = CommsPanel(mon)
    for r in range(2):
        mon.feed(hello(r, T0, backend="jax-gloo", world=2))
    mon.feed(log(0, T0 + 1, "epoch 0 done"))
    mon.feed(job_event("Failed", "WorkerFailed", "rank 1 exited", t=T0 + 2))
    panel.render(mon.snapshot())
    block = parse(panel.summary_html.value).find_all("distrain-comms")[0]
    text = block.all_text()
    assert block.attrs["data-backend"] == "jax-gloo"
    assert "JAX's own" in text and "does not apply" in text, text
    assert "NCCL_DEBUG" not in text and "unknown" not in text and not block.find_all(tag="tr")
    assert panel.accordion.get_title(0) == "Communication lines (0)"
    nccl = JobMonitor("g", "local", 2)  # JAX on GPUs uses NCCL: its reading stays
    nccl.feed(hello(0, T0, backend="jax-cuda", world=2))
    gpu = CommsPanel(nccl)
    gpu.render(nccl.snapshot())
    assert "does not apply" not in gpu.summary_html.value


def test_no_lines_yet() -> None:
    mon = JobMonitor("e", "local", 2)
    panel = CommsPanel(mon)
    panel.render(mon.snapshot())
    assert "No communication lines yet" in panel.summary_html.value


def test_every_line_is_read_even_after_it_left_the_log_buffer() -> None:
    """The monitor parses lines as they arrive: a flood cannot hide an early NCCL failure."""
    mon = JobMonitor("f", "local", 1, log_limit=10)
    panel = CommsPanel(mon)
    mon.feed(
        log(
            0,
            T0,
            "node1:100:100 [0] misc/socket.cc:484 NCCL WARN Net : Connect to "
            "10.0.0.2<35531> failed : Connection refused",
        )
    )
    for i in range(100):
        mon.feed(log(0, T0 + 1 + i, f"line {i}"))
    panel.render(mon.snapshot())
    assert mon.comms().failure != "none", mon.comms()
    assert mon.diagnosis() == mon.comms().diagnosis
    assert mon.snapshot()["diagnosis"] == mon.diagnosis()
    assert "left the log buffer" not in panel.summary_html.value
