"""The log panel: folding, rank filter, search, follow/pause, first difference (log_panel.py)."""

from __future__ import annotations

from jupyter_disttrain.events import job_event
from jupyter_disttrain.monitor import JobMonitor
from jupyter_disttrain.widgets.log_panel import LogPanel

from .dom import Node, parse
from .streams import T0, hello, log, monitor_of


def lines(panel: LogPanel) -> list[Node]:
    return parse(panel.lines.value).find_all("distrain-log-line")


def texts(panel: LogPanel) -> list[str]:
    return [ln.all_text() for ln in lines(panel)]


def render(panel: LogPanel, mon: JobMonitor) -> None:
    panel.render(mon.snapshot())


def test_lines_repeated_on_every_rank_fold_into_one() -> None:
    mon = monitor_of("restart_recovery")
    panel = LogPanel(mon)
    render(panel, mon)
    assert texts(panel) == [
        "[ranks 0-3] step 0 done",
        "[ranks 0-3] step 10 done",
        "[ranks 0-3] step 20 done",
        "[ranks 0-3] step 30 done",
        "[ranks 0-3] training finished",
    ]
    assert lines(panel)[0].attrs["data-ranks"] == "0-3"
    panel.fold.value = False
    render(panel, mon)
    assert len(texts(panel)) == 20 and texts(panel)[0] == "[rank 1] step 0 done"
    assert lines(panel)[0].find_all("distrain-log-rank")[0].all_text() == "[rank 1]"


def test_rank_filter_and_search() -> None:
    mon = monitor_of("restart_recovery")
    mon.feed(log(None, T0 + 20, "agent: workers finished"))
    panel = LogPanel(mon)
    render(panel, mon)
    assert [label for label, _ in panel.rank.options][:4] == [
        "all ranks",
        "job (launcher)",
        "rank 0",
        "rank 1",
    ]
    panel.rank.value = "2"
    render(panel, mon)
    assert {ln.attrs["data-ranks"] for ln in lines(panel)} == {"2"}
    assert texts(panel)[-1] == "[rank 2] training finished"
    panel.rank.value = "-1"
    render(panel, mon)
    assert texts(panel) == ["[job] agent: workers finished"]
    assert lines(panel)[0].attrs["data-ranks"] == "job"
    panel.rank.value = "all"
    panel.search.value = "STEP 2"
    render(panel, mon)
    assert texts(panel) == ["[ranks 0-3] step 20 done"]


def test_paused_view_keeps_its_lines_until_resumed() -> None:
    mon = JobMonitor("p", "local", 2)
    mon.feed(log(0, T0, "first"))
    panel = LogPanel(mon)
    render(panel, mon)
    panel.follow.value = False
    assert panel.follow.description == "Paused"
    mon.feed(log(1, T0 + 1, "second"))
    render(panel, mon)
    assert texts(panel) == ["[rank 0] first"]
    assert "paused" in panel.status.value
    panel.follow.value = True
    render(panel, mon)
    assert texts(panel) == ["[rank 0] first", "[rank 1] second"]


def test_first_difference_is_one_click_away() -> None:
    mon = JobMonitor("d", "local", 4)
    for r in range(4):
        mon.feed(hello(r, T0))
    t = T0 + 1
    for n in range(30):
        for r in range(4):
            text = f"batch {n} ok"
            if r == 2 and n == 17:
                text = "batch 17 skipped: NaN loss"
            mon.feed(log(r, t, text))
            t += 0.001
    panel = LogPanel(mon)
    render(panel, mon)
    assert "[ranks 0-3] batch 0 ok" in texts(panel)
    panel.first_difference.click()
    render(panel, mon)
    view = parse(panel.lines.value).find_all("distrain-logs")[0]
    assert view.attrs["data-view"] == "divergence"
    marked = [ln.all_text() for ln in lines(panel) if "distrain-log-diverge" in ln.classes]
    assert marked == [
        "[rank 0] batch 17 ok",
        "[rank 1] batch 17 ok",
        "[rank 2] batch 17 skipped: NaN loss",
        "[rank 3] batch 17 ok",
    ]
    assert not panel.follow.value
    assert "First difference at line 18" in panel.status.value
    assert "NaN loss" in panel.status.value
    panel.follow.value = True
    render(panel, mon)
    assert parse(panel.lines.value).find_all("distrain-logs")[0].attrs["data-view"] == "tail"


def test_memory_is_the_ring_buffer_and_the_panel_says_so() -> None:
    mon = JobMonitor("m", "local", 8, log_limit=50)
    mon.feed(job_event("Running", t=T0))
    panel = LogPanel(mon, max_lines=20)
    for i in range(5000):
        mon.feed(log(i % 8, T0 + i * 1e-3, f"line {i}"))
    render(panel, mon)
    snap = mon.snapshot()
    assert snap["logs"]["kept"] == 8 * 50
    assert snap["logs"]["dropped"] == 5000 - 400
    assert len(lines(panel)) == 20
    status = panel.status.value
    assert "keeps the last 50 lines per rank" in status
    assert "4,600 older lines dropped" in status


def test_a_job_that_printed_nothing_says_no_output_once_it_ended() -> None:
    mon = JobMonitor("quiet", "local", 2, nodes=1, nproc=2)
    panel = LogPanel(mon)
    mon.feed(job_event("Running", t=T0))
    mon.feed(hello(0, T0 + 1, world=2))
    render(panel, mon)
    assert parse(panel.lines.value).all_text() == "no output yet"
    mon.feed(job_event("Succeeded", t=T0 + 5))
    render(panel, mon)
    assert parse(panel.lines.value).all_text() == "no output"
