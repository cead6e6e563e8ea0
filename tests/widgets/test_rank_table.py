"""The worker table and the header from recorded event streams (rank_table.py, header.py)."""

from __future__ import annotations

from jupyter_disttrain.events import Event, job_event, rank_event
from jupyter_disttrain.monitor import JobMonitor, Where
from jupyter_disttrain.widgets.header import BLOCKING_NOTE, HeaderPanel, header_html
from jupyter_disttrain.widgets.rank_table import rank_table_html

from .dom import Node, parse
from .streams import T0, monitor_of, recorded, upto


def rows(html: str) -> dict[int, Node]:
    return {int(r.attrs["data-rank"]): r for r in parse(html).find_all("distrain-rank-row")}


def test_straggler_is_highlighted_while_running() -> None:
    mon = JobMonitor("oom", "local", 4, nodes=1, nproc=4)
    mon.feed_many(upto(recorded("oom_straggler"), "error"))
    table = rows(rank_table_html(mon.snapshot()))
    assert sorted(table) == [0, 1, 2, 3]
    assert "distrain-straggler" in table[3].classes
    assert all("distrain-straggler" not in table[r].classes for r in (0, 1, 2))
    assert table[3].attrs["data-state"] == "Running"
    assert int(table[3].cell("step")) < int(table[0].cell("step")) - 10
    assert table[0].cell("host") == "node0"


def test_first_failing_rank_is_marked_with_its_reason() -> None:
    snap = monitor_of("oom_straggler", nodes=1, nproc=4).snapshot()
    table = rows(rank_table_html(snap))
    assert {"distrain-failed", "distrain-first-failure"} <= table[1].classes
    assert table[1].cell("exit") == "OOMKilled (exit code 137)"
    assert "distrain-failed" not in table[0].classes  # stopped as a consequence
    assert table[0].attrs["data-state"] == "Stopped"
    assert "distrain-first-failure" not in table[0].classes
    # a rank that only lost its peer says so; the raw text sits behind a disclosure
    [lost] = table[0].find_all("distrain-lost-peer", tag="details")
    assert lost.find_all(tag="summary")[0].all_text() == "lost its peer (rank 1 failed)"
    assert lost.all_text().endswith("DistBackendError: NCCL watchdog timeout")
    assert [table[r].attrs["data-state"] for r in (2, 3)] == ["Stopped", "Stopped"]


def test_restarted_job_rows() -> None:
    table = rows(rank_table_html(monitor_of("restart_recovery").snapshot()))
    for rank, row in table.items():
        assert row.attrs["data-state"] == "Succeeded"
        assert row.cell("restarts") == "1"
        assert row.cell("node") == str(rank // 2)
        assert row.cell("host") == f"node{rank // 2}"
        assert row.cell("state") == "Succeeded"


def test_a_mid_size_job_shows_ranks_needing_attention_first() -> None:
    mon = JobMonitor("mid", "local", 16, nodes=2, nproc=8)
    for r in range(16):
        mon.feed(Event("hello", r, T0, {"backend": "gloo", "world_size": 16}))
    mon.feed(rank_event(12, "Failed", exit_code=1, t=T0 + 1))
    html = rank_table_html(mon.snapshot(), max_rows=10)
    table = rows(html)
    assert len(table) == 10 and 12 in table
    more = parse(html).find_all("distrain-more")
    assert "6 more ranks (6 Running)" in more[0].all_text()


def test_a_large_job_reads_as_a_summary_with_the_ranks_that_differ() -> None:
    mon = JobMonitor("big", "local", 200, nodes=25, nproc=8)
    for r in range(200):
        mon.feed(Event("hello", r, T0, {"backend": "gloo", "world_size": 200, "node_rank": r // 8}))
    mon.feed(rank_event(150, "Failed", exit_code=1, t=T0 + 1))
    html = rank_table_html(mon.snapshot(), opened=[3, 4])
    doc = parse(html)
    counts = {
        n.attrs["data-state"]: n.attrs["data-count"] for n in doc.find_all("distrain-state-count")
    }
    assert counts == {"Running": "199", "Failed": "1"}
    spans = [n.all_text() for n in doc.find_all("distrain-state-range")]
    assert spans[0].startswith("ranks 0-149, 151-199 Running (nodes 0-24)"), spans
    assert spans[1].startswith("rank 150 Failed (node 18)"), spans
    table = rows(html)
    assert sorted(table) == [3, 4, 150]  # the failed rank and the ranks opened, nothing else
    assert "distrain-opened" in table[3].attrs["class"]
    assert "distrain-opened" not in table[150].attrs["class"]


def test_header_fields_and_states() -> None:
    mon = monitor_of("restart_recovery")
    header = parse(header_html(mon.snapshot())).find_all("distrain-header")[0]
    assert header.attrs["data-state"] == "Succeeded"
    assert header.attrs["data-job"] == "restart-recovery"
    fields = {
        n.attrs["data-field"]: n.all_text() for n in header.children if "data-field" in n.attrs
    }
    assert fields["state"] == "Succeeded"
    assert fields["backend"] == "local · gloo"
    assert fields["world"] == "4 ranks (2 nodes x 2)"
    assert fields["restarts"] == "1 restart"
    assert fields["rate"].endswith("steps/s")


def never_asked() -> Where:
    raise AssertionError("the stacks were not asked for")


def test_stop_button_calls_stop_once_and_ends_disabled() -> None:
    calls: list[int] = []
    mon = JobMonitor("s", "local", 2)
    mon.feed(job_event("Running", t=T0))
    panel = HeaderPanel(lambda: calls.append(1), where=never_asked)
    panel.render(mon.snapshot())
    assert BLOCKING_NOTE not in panel.html.value and not panel.button.disabled
    assert panel.button.layout.display != "none" and panel.where_button.layout.display != "none"
    assert "distrain-stop" in panel.button._dom_classes
    panel.button.click()
    panel.button.click()
    assert calls == [1] and panel.button.disabled and panel.stopping
    mon.feed(job_event("Stopped", "stopped by user", t=T0 + 1))
    panel.render(mon.snapshot())
    assert 'data-state="Stopped"' in panel.html.value
    assert BLOCKING_NOTE not in panel.html.value and panel.button.disabled


def test_a_blocking_dashboard_says_how_to_stop_and_shows_no_button_the_kernel_cannot_answer() -> (
    None
):
    mon = JobMonitor("w", "local", 2)
    mon.feed(job_event("Running", t=T0))
    panel = HeaderPanel(lambda: None, blocking=True, where=never_asked)
    panel.render(mon.snapshot())
    assert BLOCKING_NOTE in panel.html.value and "interrupt the kernel" in BLOCKING_NOTE
    assert panel.button.layout.display == "none" and panel.where_button.layout.display == "none"


def test_a_failing_stop_is_reported_and_can_be_retried() -> None:
    def stop() -> None:
        raise RuntimeError("backend unreachable")

    mon = JobMonitor("s", "local", 2)
    panel = HeaderPanel(stop)
    panel.button.click()
    panel.render(mon.snapshot())
    assert "stop failed: RuntimeError: backend unreachable" in panel.html.value
    assert not panel.button.disabled and not panel.stopping


def test_no_stop_callable_means_no_button() -> None:
    assert HeaderPanel(None).button.disabled


def resources_monitor(gpu: bool = False) -> JobMonitor:
    mon = JobMonitor("res", "local", 3, nodes=1, nproc=3)
    mon.feed(job_event("Running", t=T0))
    for r in range(3):
        mon.feed(Event("hello", r, T0, {"backend": "gloo", "world_size": 3}))
    mb = 1 << 20
    mon.feed(Event("resources", 0, T0 + 1, {"cpu_pct": 2.0, "rss_bytes": 250 * mb}))
    mon.feed(
        Event(
            "resources",
            1,
            T0 + 1,
            {"cpu_pct": 99.0, "rss_bytes": 600 * mb, "mem_limit_bytes": 2048 * mb},
        )
    )
    if gpu:
        mon.feed(
            Event(
                "resources",
                2,
                T0 + 1,
                {
                    "cpu_pct": 1.0,
                    "rss_bytes": 260 * mb,
                    "gpu_util_pct": 87.0,
                    "gpu_mem_bytes": 3072 * mb,
                },
            )
        )
    return mon


def test_resource_columns_show_absent_figures_as_a_dash_not_zero() -> None:
    html = rank_table_html(resources_monitor().snapshot())
    heads = [th.attrs["data-col"] for th in parse(html).find_all(tag="th")]
    assert heads[7:9] == ["cpu", "mem"] and "gpu" not in heads  # no GPU anywhere: no GPU column
    table = rows(html)
    assert (table[0].cell("cpu"), table[0].cell("mem")) == ("2.0%", "250.0 MB")
    assert (table[1].cell("cpu"), table[1].cell("mem")) == ("99%", "600.0 MB / 2.0 GB")
    assert (table[2].cell("cpu"), table[2].cell("mem")) == ("—", "—")  # never sampled


def test_gpu_columns_appear_when_a_rank_has_a_gpu() -> None:
    html = rank_table_html(resources_monitor(gpu=True).snapshot())
    heads = [th.attrs["data-col"] for th in parse(html).find_all(tag="th")]
    assert heads[7:11] == ["cpu", "mem", "gpu", "gpu_mem"]
    table = rows(html)
    assert (table[2].cell("gpu"), table[2].cell("gpu_mem")) == ("87%", "3.0 GB")
    assert (table[0].cell("gpu"), table[0].cell("gpu_mem")) == ("—", "—")


def test_a_rank_far_above_the_others_is_highlighted_with_its_reason() -> None:
    table = rows(rank_table_html(resources_monitor(gpu=True).snapshot()))
    assert "distrain-outlier" in table[1].classes
    assert table[1].attrs["title"] == (
        "CPU 99% and memory 600.0 MB, far above the others (median 1.5%, 255.0 MB)"
    )
    assert all("distrain-outlier" not in table[r].classes for r in (0, 2))


def test_header_shows_progress_with_eta() -> None:
    mon = resources_monitor()
    mon.feed(Event("progress", 0, T0 + 1, {"step": 10, "total": 100}))
    mon.feed(Event("progress", 0, T0 + 6, {"step": 20, "total": 100}))
    bar = parse(header_html(mon.snapshot())).find_all("distrain-progress")[0]
    assert (bar.attrs["data-step"], bar.attrs["data-total"]) == ("20", "100")
    assert (bar.attrs["data-fraction"], bar.attrs["data-eta"]) == ("0.2000", "40")
    assert bar.all_text() == "20 of 100 steps (20%), 2 steps/s, ETA 40.0s"
    assert "distrain-progress" not in header_html(resources_monitor().snapshot())


def test_a_straggler_with_a_saturated_cpu_says_both() -> None:
    mon = JobMonitor("oom", "local", 4, nodes=1, nproc=4)
    events = upto(recorded("oom_straggler"), "error")
    mon.feed_many(events)
    t = events[-1].t
    for rank in range(4):
        cpu = 100.0 if rank == 3 else 5.0
        mon.feed(Event("resources", rank, t, {"cpu_pct": cpu, "rss_bytes": 300 << 20}))
    row = rows(rank_table_html(mon.snapshot()))[3]
    assert {"distrain-straggler", "distrain-outlier"} <= row.classes
    assert row.attrs["title"] == (
        "straggler: far behind the median step; CPU 100%, far above the others (median 5.0%)"
    )


def test_ranks_that_lost_their_peer_name_the_failed_rank_not_gloos_words() -> None:
    snap = monitor_of("rank1_raises").snapshot()
    table = rows(rank_table_html(snap))
    assert table[1].cell("exit").startswith("ValueError")  # the cause keeps its own words
    assert not table[1].find_all("distrain-lost-peer", tag="details")
    for rank in (0, 2, 3):
        [lost] = table[rank].find_all("distrain-lost-peer", tag="details")
        assert lost.find_all(tag="summary")[0].all_text() == "lost its peer (rank 1 failed)"
        assert "pair.cc" in lost.all_text()  # gloo's text is kept, behind the disclosure


def test_a_paused_rank_row_leaves_where_it_stopped_to_the_header() -> None:
    mon = JobMonitor("dbg", "local", 2)
    mon.feed_many(
        [
            job_event("Running", t=1.0),
            *[Event("hello", r, 1.0, {"pid": 100 + r}) for r in range(2)],
            Event("paused", 1, 2.0, {"file": "cell", "line": 9, "function": "<module>", "port": 1}),
        ]
    )
    snap = mon.snapshot()
    table = rows(rank_table_html(snap))
    assert table[1].attrs["data-state"] == "Paused"
    assert table[1].cell("exit") == ""
    assert table[0].cell("exit") == "waiting for rank 1 (paused)"
    page = header_html(snap, note="") + rank_table_html(snap)
    assert page.count("rank 1 paused at cell:9") == 1, page
