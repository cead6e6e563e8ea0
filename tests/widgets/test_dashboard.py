"""The whole dashboard over JobMonitors fed recorded and synthetic streams (dashboard.py)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from jupyter_disttrain.events import TERMINAL_STATES, job_event
from jupyter_disttrain.monitor import JobMonitor, Where
from jupyter_disttrain.widgets import Dashboard
from jupyter_disttrain.widgets.dashboard import WIDGET_MIME

from .dom import parse
from .streams import T0, mixed_events, monitor_of, recorded


def test_dashboard_of_a_recorded_job_shows_every_panel() -> None:
    mon = monitor_of("restart_recovery")
    dash = Dashboard(mon)
    assert dash.render_errors == []
    assert "distrain-dashboard" in dash.widget._dom_classes
    assert "distrain-job-restart-recovery" in dash.widget._dom_classes
    assert 'data-state="Succeeded"' in dash.header.html.value
    rows = parse(dash.table.value).find_all("distrain-rank-row")
    assert [r.attrs["data-state"] for r in rows] == ["Succeeded"] * 4
    assert {t.name for t in dash.plot.figure.data} == {
        "rank 0",
        "rank 1",
        "rank 2",
        "rank 3",
        "mean",
    }
    assert "[ranks 0-3] training finished" in parse(dash.logs.lines.value).all_text()
    assert 'data-backend="gloo"' in dash.comms.summary_html.value


def test_display_bundle_carries_a_static_snapshot() -> None:
    mon = monitor_of("oom_straggler", nodes=1, nproc=4)
    dash = Dashboard(mon)
    bundle = dash._repr_mimebundle_()
    assert bundle[WIDGET_MIME]["model_id"] == dash.widget.model_id
    text = bundle["text/plain"]
    assert text.startswith("oom-straggler [local/nccl] Failed")
    assert "  rank 1: OOMKilled (exit code 137); 3 ranks stopped as a consequence" in text
    html = parse(bundle["text/html"])
    rows = html.find_all("distrain-rank-row")
    assert len(rows) == 4 and "distrain-first-failure" in rows[1].classes
    assert html.find_all(tag="svg"), "a sparkline of the mean loss"
    assert "DistBackendError" in bundle["text/html"]


def test_stop_button_and_close() -> None:
    mon = JobMonitor("s", "local", 2)
    mon.feed(job_event("Running", t=T0))
    stopped: list[bool] = []
    dash = Dashboard(mon, stop=lambda: stopped.append(True))
    dash.header.button.click()
    assert stopped == [True]
    mon.feed(job_event("Stopped", "stopped by user", t=T0 + 1))
    dash.close()
    assert 'data-state="Stopped"' in dash.header.html.value
    assert dash.header.button.disabled


def test_renders_stay_under_ten_per_second_whatever_the_event_rate() -> None:
    """100k events in 2 s (500 every 10 ms), from a feeder thread."""
    mon = JobMonitor("flood", "local", 8, nodes=2, nproc=4)
    dash = Dashboard(mon, finished=lambda: False)
    events = list(mixed_events(100_000))

    def feed() -> None:
        t0 = time.monotonic()
        for k, i in enumerate(range(0, len(events), 500)):
            mon.feed_many(events[i : i + 500])
            time.sleep(max(0.0, t0 + (k + 1) * 0.01 - time.monotonic()))

    before = dash.renders
    started = time.monotonic()
    dash.start()
    feeder = threading.Thread(target=feed)
    feeder.start()
    feeder.join(120)
    dash.close()
    window = time.monotonic() - started
    renders = dash.renders - before
    assert dash.render_errors == []
    # at most ten a second; and it keeps rendering while fed (a loaded machine may starve the
    # render thread, so only a few are asked for)
    assert 2 <= renders <= 10 * window + 1, f"{renders} renders in {window:.2f} s"
    assert mon.snapshot()["logs"]["total"] == 90_000
    assert len(parse(dash.logs.lines.value).find_all("distrain-log-line")) == 200


def test_the_loop_ends_by_itself_when_the_job_ends() -> None:
    mon = JobMonitor("e", "local", 4, nodes=2, nproc=2)
    dash = Dashboard(mon)
    dash.start()
    mon.feed_many(recorded("restart_recovery"))
    deadline = time.monotonic() + 10
    while dash._loop.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not dash._loop.running
    assert mon.state in TERMINAL_STATES
    assert 'data-state="Succeeded"' in dash.header.html.value


def test_widgets_are_only_offered_in_a_kernel() -> None:
    from jupyter_disttrain.widgets import available

    assert not available(None)
    assert not available(object())  # a terminal IPython is not a ZMQ shell


def test_where_button_shows_the_ranks_stacks_and_the_header_the_hang() -> None:
    from jupyter_disttrain import events as ev

    mon = JobMonitor("hang", "local", 2, nodes=1, nproc=2)
    for rank in (0, 1):
        mon.feed(ev.Event("hello", rank, T0, {"world_size": 2}))
    runtime = [["/opt/x/jupyter_disttrain/runtime/worker.py", 381, "run"]]
    torch = [
        [
            "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
            3252,
            "all_reduce",
        ]
    ]
    frames = {
        0: [*runtime, ["<distrain-cell>", 9, "<module>"], *torch],
        1: [*runtime, ["<distrain-cell>", 11, "<module>"]],
    }
    calls = {0: "all_reduce", 1: "time.sleep"}
    for rank in (0, 1):
        thread = {
            "name": "MainThread",
            "main": True,
            "frames": frames[rank],
            "call": calls[rank],
            "cell_line": frames[rank][1][1],
        }
        fields = {"request": "h1", "reason": "hang", "quiet": 5.0, "threads": [thread]}
        mon.feed(ev.Event("stacks", rank, T0 + 10, fields))
    asked: list[int] = []
    cell = (
        "\n".join(f"line_{n}()" for n in range(1, 9)) + "\ndist.all_reduce(t)\nx()\ntime.sleep(60)"
    )

    def where() -> Where:
        asked.append(1)
        found = mon.where()
        assert found is not None
        return replace(found, cell_source=cell)

    dash = Dashboard(mon, where=where)
    dash.render()
    header = parse(dash.header.html.value)
    assert header.find_all("distrain-header")[0].attrs["data-state"] == "Hung"
    (diagnosis,) = header.find_all("distrain-diagnosis")
    assert "Hang: no rank wrote anything for 5 s" in diagnosis.all_text()
    assert "distrain-where" in dash.header.where_button._dom_classes
    dash.header.where_button.click()
    deadline = time.monotonic() + 5
    while "cell line" not in dash.header.where_out.value and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asked == [1]
    out = parse(dash.header.where_out.value)
    (shown,) = out.find_all("distrain-where-text")
    text = shown.all_text()
    assert "rank 1 is in time.sleep (cell line 11)" in text and "all_reduce" in text, text
    # the user's frames with their source lines; the runtime's and torch's folded
    assert 'File "<distrain-cell>", line 9, in <module>\n    dist.all_reduce(t)' in text
    assert 'File "<distrain-cell>", line 11, in <module>\n    time.sleep(60)' in text
    assert "worker.py" not in text and "site-packages" not in text
    assert "(2 runtime and library frames folded)" in text
    (every,) = out.find_all("distrain-where-all")
    assert "worker.py" in every.all_text() and "distributed_c10d.py" in every.all_text()
    # once the job ended, the stacks still shown are marked stale
    mon.feed(ev.job_event("Stopped", "Stopped", "stopped by user", t=T0 + 20))
    dash.render()
    (stale,) = parse(dash.header.where_out.value).find_all("distrain-where-stale")
    assert "it has ended" in stale.all_text()
    dash.close()


def test_package_versions_that_differ_show_once_as_a_warning_above_the_job() -> None:
    import dataclasses
    import importlib.metadata

    import cloudpickle

    from jupyter_disttrain import service
    from jupyter_disttrain.backends.local import LocalBackend
    from jupyter_disttrain.payload import build_payload
    from jupyter_disttrain.spec import JobSpec

    payload = build_payload(
        "import numpy as np\nreport(step=0, x=float(np.ones(1)[0]))\n1", {}, job="pkg-warn"
    )
    body = cloudpickle.loads(payload.data)
    assert body["packages"]["numpy"][1] == importlib.metadata.version("numpy")
    body["packages"]["numpy"] = ["numpy", "0.0.1"]  # as if the notebook had another numpy
    payload = dataclasses.replace(payload, data=cloudpickle.dumps(body))
    spec = JobSpec("pkg-warn", nodes=1, nproc=2, timeout=120)
    job = service.submit(spec, payload, LocalBackend())
    assert job.result(timeout=120) == 1, job.logs()
    dash = Dashboard(job.monitor)
    dash.render()
    warnings = parse(dash.header.html.value).find_all("distrain-warning")
    expected = f"numpy {importlib.metadata.version('numpy')} here, 0.0.1 in the notebook"
    assert [w.all_text() for w in warnings] == [f"warning: package versions differ: {expected}"], (
        dash.header.html.value
    )


def test_the_end_state_is_drawn_with_the_chart_complete_in_its_model() -> None:
    """A fast job with a restart: when the render loop ends, the chart holds every rank's
    last step, and so does the state a view made afterwards draws from (the display is
    refreshed at the end: appends reached only the views shown before)."""
    mon = JobMonitor("fast", "local", 4, nodes=2, nproc=2)
    dash = Dashboard(mon)
    figure = dash.plot.figure
    figure._handle_custom_msg({"type": "ready"}, [])  # a view listens from the start
    dash.start()
    mon.feed_many(recorded("restart_recovery"))
    deadline = time.monotonic() + 10
    while dash._loop.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not dash._loop.running and mon.state == "Succeeded"
    last = max(r.step or 0 for r in mon.ranks())
    assert f"step {last}" in dash.header.html.value
    shown = {t["name"]: t for t in figure._widget_data}
    for rank in range(4):
        assert shown[f"rank {rank}"]["x"][-1] == mon.ranks()[rank].step, rank
    assert shown["mean"]["x"][-1] == last
