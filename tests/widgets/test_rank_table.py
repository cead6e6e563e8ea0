"""The worker table and the header from recorded event streams (rank_table.py, header.py)."""

from __future__ import annotations

from jupyter_disttrain.events import Event, job_event, rank_event
from jupyter_disttrain.monitor import JobMonitor
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
    assert "distrain-failed" in table[0].classes
    assert "distrain-first-failure" not in table[0].classes
    assert table[0].cell("exit") == "exit 1: DistBackendError: NCCL watchdog timeout"
    assert [table[r].attrs["data-state"] for r in (2, 3)] == ["Stopped", "Stopped"]


def test_restarted_job_rows() -> None:
    table = rows(rank_table_html(monitor_of("restart_recovery").snapshot()))
    for rank, row in table.items():
        assert row.attrs["data-state"] == "Succeeded"
        assert row.cell("restarts") == "1"
        assert row.cell("node") == str(rank // 2)
        assert row.cell("host") == f"node{rank // 2}"
        assert row.cell("state") == "Succeeded"


def test_large_jobs_show_ranks_needing_attention_first() -> None:
    mon = JobMonitor("big", "local", 200, nodes=25, nproc=8)
    for r in range(200):
        mon.feed(Event("hello", r, T0, {"backend": "gloo", "world_size": 200}))
    mon.feed(rank_event(150, "Failed", exit_code=1, t=T0 + 1))
    html = rank_table_html(mon.snapshot(), max_rows=10)
    table = rows(html)
    assert len(table) == 10 and 150 in table
    more = parse(html).find_all("distrain-more")
    assert "190 more ranks (190 Running)" in more[0].all_text()


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


def test_stop_button_calls_stop_once_and_ends_disabled() -> None:
    calls: list[int] = []
    mon = JobMonitor("s", "local", 2)
    mon.feed(job_event("Running", t=T0))
    panel = HeaderPanel(lambda: calls.append(1), blocking=True)
    panel.render(mon.snapshot())
    assert BLOCKING_NOTE in panel.html.value and not panel.button.disabled
    assert "distrain-stop" in panel.button._dom_classes
    panel.button.click()
    panel.button.click()
    assert calls == [1] and panel.button.disabled and panel.stopping
    mon.feed(job_event("Stopped", "stopped by user", t=T0 + 1))
    panel.render(mon.snapshot())
    assert 'data-state="Stopped"' in panel.html.value
    assert BLOCKING_NOTE not in panel.html.value and panel.button.disabled


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
